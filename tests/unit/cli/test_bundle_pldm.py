"""``lockstep bundle pldm``: a firmware image wrapped so the simulator's BMCs accept it (issue
31: the README's first rollout made its package with a Python one-liner into the benches)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from lockstep_cli.main import app
from lockstep_common.pldm import parse_package
from lockstep_sim.fleet import build_fleet
from lockstep_sim.update_service import UpdateOptions, plan_update

pytestmark = pytest.mark.unit
VERSION = "97.00.9A.00.01"


def pldm(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["bundle", "pldm", *args])
    return result.exit_code, result.output


def test_every_gpu_of_a_simulated_gb200_node_takes_the_package(tmp_path: Path) -> None:
    image = tmp_path / "vbios.bin"
    image.write_bytes(b"my firmware " * 100)
    out = tmp_path / "vbios.pldm"
    code, said = pldm("gpu", VERSION, "--image", str(image), "--out", str(out))
    assert code == 0, said
    (node,) = build_fleet(1, "gb200")
    plan = plan_update(node, out.read_bytes(), UpdateOptions())
    assert plan == {f"HGX_FW_GPU_{i}": VERSION for i in range(4)}
    package = parse_package(out.read_bytes())
    assert package.header.version.text == VERSION
    raw, wrapped = out.read_bytes(), image.read_bytes()
    for c in package.components:
        assert raw[c.location_offset : c.location_offset + c.size] == wrapped


def test_both_nic_families_of_a_tray_take_a_nic_package(tmp_path: Path) -> None:
    out = tmp_path / "nic.pldm"
    assert pldm("nic", "28.43.1000", "--out", str(out))[0] == 0
    (node,) = build_fleet(1, "gb200")
    planned = plan_update(node, out.read_bytes(), UpdateOptions())
    nics = {m for m, c in node.components.items() if c.cls.kind == "nic" and c.cls.updateable}
    assert set(planned) == nics and len({node.components[m].cls for m in nics}) == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["toaster", "1"], "gb200 has no updateable device of kind 'toaster': one of bmc,"),
        (["gpu", "1", "--profile", "dgx"], "profile 'dgx': one of gb200, hgx-h100"),
        (["gpu", "1", "--image", "/nonexistent/x.bin"], "/nonexistent/x.bin: No such file"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(
    tmp_path: Path, args: list[str], message: str
) -> None:
    out = tmp_path / "p.pldm"
    code, said = pldm(*args, "--out", str(out))
    assert code == 2 and message in said and said.count("\n") == 1, said
    assert not out.exists()


def test_an_existing_file_is_never_overwritten(tmp_path: Path) -> None:
    out = tmp_path / "p.pldm"
    out.write_bytes(b"keep")
    code, said = pldm("gpu", "1", "--out", str(out))
    assert code == 2 and "exists: nothing written" in said
    assert out.read_bytes() == b"keep"


def test_an_empty_image_is_refused(tmp_path: Path) -> None:
    empty = tmp_path / "empty.bin"
    empty.write_bytes(b"")
    code, said = pldm("gpu", "1", "--image", str(empty), "--out", str(tmp_path / "p.pldm"))
    assert code == 2 and "the image is empty" in said
