"""Drift scenarios: parsing, resolving defaults, the seeded default mix, and the in-band drifts
walked through the node agent's transition table (no servers)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from lockstep_common.events.v1 import InventoryObserved
from lockstep_common.vocabulary import Component
from lockstep_sim.agents.reports import inventory_event
from lockstep_sim.agents.software import NodeSoftware
from lockstep_sim.agents.state import Phase
from lockstep_sim.bmc import Bmc
from lockstep_sim.drifts import DriftControl
from lockstep_sim.faults import Fault, FaultPlan, FaultState
from lockstep_sim.fleet import build_fleet
from lockstep_sim.injection import FaultControl
from lockstep_sim.scenarios import (
    Drift,
    DriftKind,
    ScenarioError,
    default_mix,
    parse_drifts,
    parse_request,
    resolve,
)

pytestmark = pytest.mark.unit
FLEET = build_fleet(256, "gb200", seed=0)
_NOW = datetime(2026, 11, 21, tzinfo=UTC)


def test_default_mix_is_seeded_distinct_and_fully_resolved() -> None:
    mix = default_mix(FLEET, seed=7)
    assert mix == default_mix(FLEET, seed=7)
    assert [d.node for d in mix] != [d.node for d in default_mix(FLEET, seed=8)]
    assert [d.kind for d in mix] == list(DriftKind)
    assert len({d.node for d in mix}) == 5
    by_kind = {d.kind: d for d in mix}
    revert = by_kind[DriftKind.SILENT_REVERT]
    assert (revert.member, revert.version) == ("FW_BMC_0", "GB200Nvl-24.09-4")
    rma = by_kind[DriftKind.RMA_REPLACEMENT]
    assert (rma.member, rma.version) == ("HGX_FW_GPU_2", "97.00.52.00.01")
    assert by_kind[DriftKind.GSP_MISMATCH].driver == "580.95.05"
    cuda = by_kind[DriftKind.CUDA_INCOMPATIBLE]
    assert (cuda.driver, cuda.cuda) == ("570.172.08", "13.0")
    assert by_kind[DriftKind.UNREACHABLE_BMC].mode == "connection_reset"
    assert parse_drifts({"drifts": [d.to_dict() for d in mix]}) == mix  # GET round-trips


def test_mixed_fleet_falls_back_to_a_gpu_when_the_bmc_has_no_older_release() -> None:
    h100 = next(n for n in build_fleet(8, "mixed", seed=1) if n.profile == "hgx-h100")
    revert = resolve(Drift(DriftKind.SILENT_REVERT, h100.id), h100)
    assert (revert.member, revert.version) == ("HGX_FW_GPU_SXM_1", "96.00.5E.00.01")
    rma = resolve(Drift(DriftKind.RMA_REPLACEMENT, h100.id), h100)
    assert rma.member == "HGX_FW_GPU_SXM_3"


def test_default_mix_needs_five_nodes() -> None:
    with pytest.raises(ValueError, match="at least 5 nodes"):
        default_mix(FLEET[:4], seed=0)
    with pytest.raises(ScenarioError, match="mix: the default mix needs at least 5"):
        parse_request({"mix": "default"}, FLEET[:4])


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ([], "body"),
        ({"drifts": [], "extra": 1}, "extra"),
        ({"drifts": []}, "drifts"),
        ({"drifts": [{"kind": "meltdown", "node": "node-00001"}]}, "drifts[0].kind"),
        ({"drifts": [{"kind": ["x"], "node": "node-00001"}]}, "drifts[0].kind"),
        ({"drifts": [{"kind": "silent_revert"}]}, "drifts[0].node"),
        ({"drifts": [{"kind": "silent_revert", "node": "n", "cuda": "13.0"}]}, "drifts[0].cuda"),
        ({"drifts": [{"kind": "gsp_mismatch", "node": "n", "driver": 580}]}, "drifts[0].driver"),
        ({"drifts": [{"kind": "cuda_incompatible", "node": "n", "cuda": "13"}]}, "drifts[0].cuda"),
        ({"drifts": [{"kind": "unreachable_bmc", "node": "n", "mode": "off"}]}, "drifts[0].mode"),
        (
            {"drifts": [{"kind": "unreachable_bmc", "node": "n"}, {"kind": "x", "node": "m"}]},
            "drifts[1].kind",
        ),
        (
            {"drifts": [{"kind": "unreachable_bmc", "node": "n"}] * 2},
            "drifts[1].node",
        ),
        ({"mix": "chaos"}, "mix"),
        ({"mix": "default", "seed": "7"}, "seed"),
        ({"mix": "default", "drifts": []}, "drifts"),
    ],
)
def test_bad_input_names_the_field(raw: Any, field: str) -> None:
    with pytest.raises(ScenarioError) as err:
        parse_request(raw, FLEET)
    assert err.value.field == field and err.value.status == 400
    assert str(err.value).startswith(f"{field}: ")


@pytest.mark.parametrize(
    ("drift", "field", "problem"),
    [
        (Drift(DriftKind.RMA_REPLACEMENT, "node-00000", member="FW_BMC_0"), "member", "not a GPU"),
        (Drift(DriftKind.SILENT_REVERT, "node-00000", member="NOPE"), "member", "no Firmware"),
        (Drift(DriftKind.SILENT_REVERT, "node-00000", member="UEFI"), "version", "required"),
        (
            Drift(DriftKind.SILENT_REVERT, "node-00000", version="GB200Nvl-24.12-8"),
            "version",
            "already reports",
        ),
    ],
)
def test_resolve_refuses_what_would_be_no_drift(drift: Drift, field: str, problem: str) -> None:
    with pytest.raises(ScenarioError, match=problem) as err:
        resolve(drift, FLEET[0])
    assert err.value.field == field


def test_fault_state_add_and_discard_keep_the_other_counters() -> None:
    state = FaultState()
    limited = Fault("http_5xx", count=1)
    state.replace(FaultPlan((limited,)))
    assert state.fire(frozenset({"http_5xx"}), "node-00001") == limited
    ours = Fault("connection_reset", nodes=("node-00002",))
    twin = Fault("connection_reset", nodes=("node-00002",))
    state.add(ours)
    state.add(twin)
    assert state.fire(frozenset({"http_5xx"}), "node-00001") is None  # count kept: spent
    assert state.discard(ours) and state.plan.faults[1] is twin  # the object, not its twin
    assert not state.discard(ours)
    assert state.fire(frozenset({"connection_reset"}), "node-00002") is twin


def _control(nodes: int = 3) -> DriftControl:
    fleet = build_fleet(nodes, "gb200", seed=0)
    faults = FaultControl()
    bmcs = {n.id: Bmc(n, "admin", "pw", 1.0, faults=faults) for n in fleet}
    software = {n.id: NodeSoftware(n.id) for n in fleet}
    return DriftControl(fleet, bmcs, faults, software)


def _report(control: DriftControl, node: str) -> InventoryObserved:
    return inventory_event(node, "site-ams1", control.software[node].state, 1, _NOW)


def test_gsp_mismatch_follows_seed_004_and_the_recovery_undoes_it() -> None:
    control = _control()
    before = _report(control, "node-00001")
    control.apply([Drift(DriftKind.GSP_MISMATCH, "node-00001")])
    agent = control.software["node-00001"]
    assert agent.phase is Phase.GSP_MISMATCH and not agent.faults.missing_firmware_dir
    report = _report(control, "node-00001")
    assert report.loaded_module_version == "580.95.05"
    assert report.firmware_dirs == ("580.65.06",)
    assert report.components[Component.DRIVER] == "580.95.05"
    assert report.components[Component.GPU_GSP] == "580.65.06"
    undone = control.undo("node-00001")
    assert undone.restored
    assert control.software["node-00001"].phase is Phase.READY  # seed 004 recovery ran
    after = _report(control, "node-00001")
    assert after.components == before.components
    assert (after.firmware_dirs, after.loaded_module_version) == (
        before.firmware_dirs,
        before.loaded_module_version,
    )


def test_cuda_incompatible_reports_a_toolkit_the_driver_does_not_support() -> None:
    control = _control()
    before = _report(control, "node-00002")
    (applied,) = control.apply([Drift(DriftKind.CUDA_INCOMPATIBLE, "node-00002")])
    assert (applied.driver, applied.cuda) == ("570.172.08", "13.0")
    report = _report(control, "node-00002")
    assert report.components[Component.DRIVER] == "570.172.08"
    assert report.components[Component.CUDA] == "13.0"
    assert control.software["node-00002"].phase is Phase.READY
    assert control.undo("node-00002").restored
    assert _report(control, "node-00002").components == before.components


def test_in_band_refusals_change_nothing() -> None:
    control = _control()
    agent = control.software["node-00000"]
    state = agent.state
    supported = Drift(DriftKind.CUDA_INCOMPATIBLE, "node-00000", driver="580.65.06", cuda="12.8")
    good = Drift(DriftKind.UNREACHABLE_BMC, "node-00001")
    with pytest.raises(ScenarioError, match=r"drifts\[1\]\.cuda: driver 580.65.06 supports"):
        control.apply([good, supported])
    same = Drift(DriftKind.GSP_MISMATCH, "node-00000", driver="580.65.06")
    with pytest.raises(ScenarioError, match="already installed"):
        control.apply([same])
    agent.install_driver("580.95.05")  # mid-change: DKMS built, not rebooted
    with pytest.raises(ScenarioError, match="phase dkms_built") as err:
        control.apply([Drift(DriftKind.GSP_MISMATCH, "node-00000", driver="570.172.08")])
    assert err.value.status == 409
    twice = [good, Drift(DriftKind.SILENT_REVERT, "node-00001")]
    with pytest.raises(ScenarioError, match=r"drifts\[1\]\.node: node-00001 appears twice"):
        control.apply(twice)
    assert control.plan() == [] and control.faults.plan.faults == ()
    assert agent.state.cuda == state.cuda


def test_undo_leaves_a_drift_someone_else_resolved() -> None:
    control = _control()
    bmc = control.bmcs["node-00000"]
    (revert,) = control.apply([Drift(DriftKind.SILENT_REVERT, "node-00000")])
    assert revert.member is not None
    bmc.node.components[revert.member].version = "GB200Nvl-25.01-1"  # a rollout re-flashed it
    undone = control.undo("node-00000")
    assert not undone.restored
    assert bmc.node.components[revert.member].version == "GB200Nvl-25.01-1"
    with pytest.raises(ScenarioError, match="no active drift"):
        control.undo("node-00000")
