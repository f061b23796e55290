"""Fault plans: parsing, deterministic targeting, firing counts and refused files."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from lockstep_sim.cli import sim_app
from lockstep_sim.faults import (
    Fault,
    FaultPlan,
    FaultPlanError,
    FaultState,
    load_faults,
    parse_plan,
)

pytestmark = pytest.mark.unit
NODES = [f"node-{i:05d}" for i in range(1000)]

YAML_PLAN = """
seed: 3
faults:
  - kind: http_5xx
    fraction: 0.25
    status: 502
    retry_after: 9
    count: 2
  - kind: task_stuck
    nodes: [node-00001]
    components: [gpu]
    percent: 99
  - kind: bmc_reboot_mid_task
    duration_minutes: 3.5
    resume: false
    forget_state: true
"""


def test_yaml_and_json_files_load(tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text(YAML_PLAN)
    plan = load_faults(path)
    assert plan.seed == 3
    assert [f.kind for f in plan.faults] == ["http_5xx", "task_stuck", "bmc_reboot_mid_task"]
    assert plan.faults[0] == Fault("http_5xx", fraction=0.25, status=502, retry_after=9, count=2)
    assert plan.faults[1].nodes == ("node-00001",) and plan.faults[1].components == ("gpu",)
    assert plan.faults[2].resume is False and plan.faults[2].forget_state is True
    as_json = tmp_path / "plan.json"
    as_json.write_text('{"faults": [{"kind": "latency", "latency_ms": 50}]}')
    assert load_faults(as_json) == FaultPlan((Fault("latency", latency_ms=50),))
    assert parse_plan(plan.to_dict()) == plan  # GET /faults round-trips through PUT


def test_fraction_targeting_is_deterministic_and_near_the_fraction() -> None:
    plan = FaultPlan((Fault("http_5xx", fraction=0.2),), seed=11)
    hit = [n for n in NODES if plan.targets_node(0, n)]
    again = FaultPlan((Fault("http_5xx", fraction=0.2),), seed=11)
    assert hit == [n for n in NODES if again.targets_node(0, n)]
    assert 150 < len(hit) < 250
    other_seed = FaultPlan((Fault("http_5xx", fraction=0.2),), seed=12)
    assert hit != [n for n in NODES if other_seed.targets_node(0, n)]
    assert not any(FaultPlan((Fault("hang", fraction=0.0),)).targets_node(0, n) for n in NODES)


def test_node_list_component_and_count() -> None:
    state = FaultState()
    fault = Fault("failed_flash", nodes=("node-00002",), components=("gpu",), count=1)
    state.replace(FaultPlan((fault,)))
    assert state.fire(frozenset({"failed_flash"}), "node-00001", "HGX_FW_GPU_0", "gpu") is None
    assert state.fire(frozenset({"failed_flash"}), "node-00002", "FW_BMC_0", "bmc") is None
    assert state.fire(frozenset({"failed_flash"}), "node-00002", "HGX_FW_GPU_0", "gpu") == fault
    assert state.fire(frozenset({"failed_flash"}), "node-00002", "HGX_FW_GPU_1", "gpu") is None
    by_member = Fault("bricked", components=("HGX_FW_GPU_3",))
    state.replace(FaultPlan((by_member,)))
    assert state.fire(frozenset({"bricked"}), "node-00000", "HGX_FW_GPU_3", "gpu") == by_member
    assert state.fire(frozenset({"bricked"}), "node-00000", "HGX_FW_GPU_2", "gpu") is None


def test_a_bad_image_degrades_only_where_that_version_is_activated() -> None:
    state = FaultState()
    bad = Fault("degrade_health", components=("gpu",), image="97.00.C5.00.01")
    state.replace(FaultPlan((bad,)))
    kinds = frozenset({"degrade_health"})
    assert state.fire(kinds, "node-00001", "HGX_FW_GPU_0", "gpu", "97.00.A1.00.07") is None
    assert state.fire(kinds, "node-00001", "HGX_FW_GPU_0", "gpu", "97.00.C5.00.01") == bad
    assert parse_plan([bad.to_dict()]).faults == (bad,)


def test_probability_is_seeded() -> None:
    def firings(seed: int) -> list[bool]:
        state = FaultState()
        state.replace(FaultPlan((Fault("connection_reset", probability=0.5),), seed=seed))
        kinds = frozenset({"connection_reset"})
        return [state.fire(kinds, "node-00000") is not None for _ in range(200)]

    assert firings(5) == firings(5)
    assert 60 < sum(firings(5)) < 140


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"faults": [{"kind": "meteor"}]}, "faults[0].kind"),
        ({"faults": [{"kind": "http_5xx", "status": 404}]}, "faults[0].status"),
        ({"faults": [{"kind": "http_5xx", "status": "503"}]}, "faults[0].status"),
        (
            {"faults": [{"kind": "latency"}, {"kind": "hang", "fraction": 1.5}]},
            "faults[1].fraction",
        ),
        ({"faults": [{"kind": "hang", "nodes": "node-00001"}]}, "faults[0].nodes"),
        ({"faults": [{"kind": "hang", "colour": "red"}]}, "faults[0].colour"),
        ({"faults": [{"kind": "task_stuck", "percent": 101}]}, "faults[0].percent"),
        ({"faults": [{"kind": "task_stuck", "resume": 1}]}, "faults[0].resume"),
        ({"faults": [{"kind": "latency", "count": True}]}, "faults[0].count"),
        ({"faults": [{"kind": "hang", "max_seconds": 0}]}, "faults[0].max_seconds"),
        ({"faults": {"kind": "hang"}}, "faults"),
        ({"seed": "x"}, "seed"),
        ({"fautls": []}, "fautls"),
        ("nonsense", "plan"),
    ],
)
def test_bad_plans_name_the_field(raw: object, field: str) -> None:
    with pytest.raises(FaultPlanError) as caught:
        parse_plan(raw)
    assert caught.value.field == field
    assert str(caught.value).startswith(f"{field}: ")


def test_bad_files_are_refused_with_the_file_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("faults:\n  - kind: http_5xx\n    status: 418\n")
    with pytest.raises(FaultPlanError, match=r"bad\.yaml: faults\[0\]\.status: must be 500"):
        load_faults(bad)
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    with pytest.raises(FaultPlanError, match="not valid JSON"):
        load_faults(broken)
    with pytest.raises(FaultPlanError, match="cannot read"):
        load_faults(tmp_path / "missing.yaml")


def test_serve_refuses_a_bad_fault_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("faults:\n  - kind: meteor\n")
    result = CliRunner().invoke(sim_app, ["serve", "--faults", str(bad)], env={"COLUMNS": "200"})
    assert result.exit_code != 0
    assert "faults[0].kind" in result.output


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("bad-image", "degrade_health"),
        ("thermal-rack", "thermal_event"),
        ("network-fleet-wide", "network_degraded"),
    ],
)
def test_the_example_health_scenarios_load(name: str, kind: str) -> None:
    """docs/simulator.md's scenario files (``lockstep sim run --faults FILE``)."""
    root = Path(__file__).resolve().parents[3]
    plan = load_faults(root / "examples" / "health" / f"{name}.yaml")
    assert [f.kind for f in plan.faults] == [kind]
