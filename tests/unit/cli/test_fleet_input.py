"""``lockstep fleet pin|admit`` input checks and the sweep view: no servers needed."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from lockstep_cli.fleet_bus import InputError, admission_request, parse_stack, pins_for
from lockstep_cli.main import app
from lockstep_common import canonical
from lockstep_common.vocabulary import Component
from lockstep_inventory.domain.pins import parse_selector

pytestmark = pytest.mark.unit
HASH = "a" * 64


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


@pytest.fixture(autouse=True)
def nowhere(monkeypatch: pytest.MonkeyPatch) -> None:
    # Anything that got past validation would have to connect here, and fail differently.
    monkeypatch.setenv("LOCKSTEP_NATS_URL", "nats://127.0.0.1:1")
    monkeypatch.setenv("LOCKSTEP_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")


def test_parse_stack_reads_yaml_and_names_the_bad_key() -> None:
    stack = parse_stack("gb200:\n  bmc: '1.2'\n  driver: 570.124.06\n", "s.yaml")
    assert stack == {"gb200": {Component.BMC: "1.2", Component.DRIVER: "570.124.06"}}
    with pytest.raises(InputError, match=r"s.yaml: gb200.bmcc: not a Lockstep component"):
        parse_stack('{"gb200": {"bmcc": "1"}}', "s.yaml")


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("gb200:\n  cuda: 12.10\n", "gb200.cuda: version must be a non-empty string"),
        ("[1, 2]", "expected a mapping"),
        ("gb200: {}", "'gb200': expected a profile name mapping components"),
        ("gb200: [", "not YAML or JSON"),
    ],
)
def test_parse_stack_refuses(text: str, needle: str) -> None:
    with pytest.raises(InputError, match=needle):
        parse_stack(text, "f")


def test_pins_for_makes_one_pin_per_site_scoped_to_it() -> None:
    stack = {"gb200": {Component.BMC: "1.2"}}
    selector = parse_selector("site=a,site=b,pool=p")
    stack_hash, pins = pins_for("ns", selector, stack, "r1")
    assert stack_hash == canonical.stack_hash({"gb200": {"bmc": "1.2"}})
    assert [(p.site, p.subject) for p in pins] == [
        ("a", "ns.pin.changed.a"),
        ("b", "ns.pin.changed.b"),
    ]
    assert pins[1].envelope.data.scope.sites == ("b",)
    assert pins[1].envelope.data.scope.pools == ("p",)
    with pytest.raises(InputError, match="at least one site"):
        pins_for("ns", parse_selector("pool=p"), stack, None)
    with pytest.raises(InputError, match="rollout_id"):
        pins_for("ns", selector, stack, "not a token!")


def test_admission_request_validation() -> None:
    assert admission_request(HASH, ["n1"]).node_ids == ("n1",)
    with pytest.raises(InputError, match="64 lower-case hex"):
        admission_request("A" * 64, ["n1"])
    with pytest.raises(InputError, match="no nodes"):
        admission_request(HASH, [])
    with pytest.raises(InputError, match="node_ids"):
        admission_request(HASH, ["bad node"])


def test_pin_bad_input_exits_2_before_connecting(tmp_path: Path) -> None:
    stack = tmp_path / "stack.json"
    stack.write_text('{"gb200": {"bios": "1", "gpu_firmware": "2"}}')
    code, out = run("fleet", "pin", "--scope", "site=a", "--stack", str(stack))
    assert code == 2 and "gb200.gpu_firmware: not a Lockstep component" in out
    stack.write_text('{"gb200": {"bios": "1"}}')
    code, out = run("fleet", "pin", "--scope", "rack=r1", "--stack", str(stack))
    assert code == 2 and "--scope: 'rack': unknown key" in out
    code, out = run("fleet", "pin", "--scope", "site=a", "--stack", str(tmp_path / "nope.yaml"))
    assert code == 2 and "nope.yaml" in out
    # Valid input gets as far as the registry (the scope must select a node): the inventory,
    # asked over NATS, unreachable here (exit 3), never the database.
    code, out = run("fleet", "pin", "--scope", "site=a", "--stack", str(stack), "--timeout", "1")
    assert code == 3 and "NATS at" in out and "unreachable" in out and "PostgreSQL" not in out


def test_admit_bad_input_exits_2_and_unreachable_nats_exits_3() -> None:
    code, out = run("fleet", "admit", "--stack-hash", "abc", "--nodes", "n1")
    assert code == 2 and "--stack-hash 'abc'" in out
    code, out = run("fleet", "admit", "--stack-hash", HASH, "--nodes", " , ")
    assert code == 2 and "no nodes" in out
    code, out = run("fleet", "admit", "--stack-hash", HASH, "--nodes", "n1", "--timeout", "1")
    assert code == 3 and "unreachable" in out
