"""The file probes on real captured files, laid out in a fake root as on a node."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lockstep_agent.probes.files import (
    DriverLine,
    nccl_from_names,
    parse_cuda_version,
    parse_driver_line,
    probe_files,
)
from tests.reference import REFERENCE

pytestmark = pytest.mark.unit
CAPTURES = REFERENCE / "node-agent"


@pytest.mark.parametrize(
    ("capture", "version", "open_module"),
    [
        ("proc-driver-nvidia-version.565.57.01-open", "565.57.01", True),
        ("proc-driver-nvidia-version.580.173.02", "580.173.02", False),
        ("proc-driver-nvidia-version.35.3.1-jetson", "35.3.1", True),
    ],
)
def test_driver_line_of_real_modules(capture: str, version: str, open_module: bool) -> None:
    line = parse_driver_line((CAPTURES / "issues" / capture).read_text(encoding="utf-8"))
    assert line is not None
    assert (line.version, line.open_module) == (version, open_module)
    assert line.build  # the build host and date are kept as evidence


@pytest.mark.parametrize(
    "text",
    [
        "",
        "GCC version:  gcc version 13.3.0\n",
        "NVRM version: NVIDIA UNIX Kernel Module\n",
        "junk NVRM version: NVIDIA UNIX x86_64 Kernel Module  1.2  x\n",
    ],
)
def test_driver_line_absent_or_malformed_is_none(text: str) -> None:
    assert parse_driver_line(text) is None


def test_cuda_version_json() -> None:
    # The layout NVIDIA's toolkit writes to <prefix>/version.json since CUDA 11.1.
    text = '{\n   "cuda" : {\n      "name" : "CUDA SDK",\n      "version" : "12.4.1"\n   }\n}\n'
    assert parse_cuda_version(text) == "12.4.1"
    for bad in ("", "[]", '{"cuda": "12"}', '{"cuda": {"version": 12}}', "{not json"):
        assert parse_cuda_version(bad) is None


def test_nccl_from_sonames_takes_the_full_soname() -> None:
    names = [
        "libnccl.so",
        "libnccl.so.2",
        "libnccl.so.2.21.5",
        "libnccl.so.2.9.9",
        "libnccl_static.a",
        "libnccl.so.2.x.1",
    ]
    assert nccl_from_names(names) == "2.21.5"
    assert nccl_from_names(["libnccl.so.2"]) is None


def _fake_root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    (root / "sys/module/nvidia").mkdir(parents=True)
    (root / "sys/module/nvidia/version").write_text("580.173.02\n")
    (root / "proc/driver/nvidia").mkdir(parents=True)
    shutil.copy(
        CAPTURES / "issues/proc-driver-nvidia-version.580.173.02",
        root / "proc/driver/nvidia/version",
    )
    (root / "proc/sys/kernel").mkdir(parents=True)
    (root / "proc/sys/kernel/osrelease").write_text("6.8.0-45-generic\n")
    for v in ("570.133.20", "580.173.02"):
        (root / "lib/firmware/nvidia" / v).mkdir(parents=True)
    shutil.copytree(CAPTURES / "gpud/sys-class-infiniband-h100", root / "sys/class/infiniband")
    lib = root / "usr/lib/x86_64-linux-gnu"
    lib.mkdir(parents=True)
    (lib / "libnccl.so.2.21.5").write_bytes(b"")
    (lib / "libnccl.so.2").symlink_to("libnccl.so.2.21.5")
    (root / "usr/local/cuda").mkdir(parents=True)
    (root / "usr/local/cuda/version.json").write_text('{"cuda": {"version": "12.4.1"}}')
    return root


def test_probe_files_reads_a_node_root(tmp_path: Path) -> None:
    facts = probe_files(_fake_root(tmp_path))
    assert facts.loaded_module == "580.173.02"
    assert facts.driver == DriverLine(
        version="580.173.02", open_module=False, build="Tue Jun 23 08:38:17 UTC 2026"
    )
    assert facts.firmware_dirs == ("570.133.20", "580.173.02")
    assert facts.nic_firmware == {"mlx5_0": "28.41.1000", "mlx5_bond_0": "32.38.3056"}
    assert facts.nccl == "2.21.5"
    assert facts.cuda == "12.4.1"
    assert facts.kernel == "6.8.0-45-generic"


def test_probe_files_of_an_empty_root_reports_nothing(tmp_path: Path) -> None:
    facts = probe_files(tmp_path)
    assert facts.model_dump() == {
        "loaded_module": None,
        "driver": None,
        "firmware_dirs": (),
        "cuda": None,
        "nccl": None,
        "nic_firmware": {},
        "kernel": None,
    }


def test_control_characters_in_a_file_never_reach_a_version(tmp_path: Path) -> None:
    (tmp_path / "sys/module/nvidia").mkdir(parents=True)
    (tmp_path / "sys/module/nvidia/version").write_bytes(b"580.1\x1b[2J\n")
    assert probe_files(tmp_path).loaded_module == "580.1\ufffd[2J"
