"""Admission verdicts and which components are judged before every source has reported."""

from __future__ import annotations

import datetime as dt

import pytest

from lockstep_common.compatibility.files import packaged_rules
from lockstep_common.events.v1 import ScopeSelector
from lockstep_common.vocabulary import Component, DriftKind, ObservationSource
from lockstep_inventory.domain.evaluate import RolloutFacts, admission, evaluate
from lockstep_inventory.domain.fleet_file import NodeEntry
from lockstep_inventory.domain.observation import Observation, unreadable
from lockstep_inventory.domain.pins import Pin

pytestmark = pytest.mark.unit
C = Component
REDFISH, AGENT = ObservationSource.REDFISH, ObservationSource.AGENT
NOW = dt.datetime(2026, 11, 21, 12, tzinfo=dt.UTC)
AGE = dt.timedelta(minutes=15)
NODE = NodeEntry(
    id="n1", bmc_url="http://127.0.0.1:8000", profile="gb200", site="ams1", credentials="env:B"
)
FIRMWARE = {C.BMC: "b1", C.GPU_VBIOS: "v1"}
IN_BAND = {C.DRIVER: "580.65.06", C.GPU_GSP: "580.65.06", C.CUDA: "13.0"}
STACK = {"gb200": {**FIRMWARE, **IN_BAND}}
H = "a" * 64
RULES = packaged_rules()


def obs(source: ObservationSource, components: dict[Component, str], **kw: object) -> Observation:
    extra = (
        {"loaded_module": "580.65.06", "firmware_dirs": ("580.65.06",)} if source is AGENT else {}
    )
    return Observation(source, 1, kw.pop("at", NOW), components=components, **{**extra, **kw})  # type: ignore[arg-type]


GOOD = {REDFISH: obs(REDFISH, FIRMWARE), AGENT: obs(AGENT, IN_BAND)}


def verdict(
    observations: dict[ObservationSource, Observation], **kw: object
) -> tuple[bool, tuple[str, ...]]:
    args: dict[str, object] = {
        "node_id": "n1",
        "node": NODE,
        "stack_hash": H,
        "stack": STACK,
        "observations": observations,
        "drift": (),
        "facts": RolloutFacts(),
        "now": NOW,
        "max_age": AGE,
    }
    args.update(kw)
    result = admission(**args)  # type: ignore[arg-type]
    return result.admitted, result.reasons


def test_a_conforming_fresh_node_is_admitted() -> None:
    assert verdict(GOOD) == (True, ())


def test_every_reason_is_given() -> None:
    stale = {
        REDFISH: obs(REDFISH, {**FIRMWARE, C.BMC: "b0"}, at=NOW - 2 * AGE),
        AGENT: obs(AGENT, IN_BAND),
    }
    admitted, reasons = verdict(stale, facts=RolloutFacts(active_wave="r7"))
    assert not admitted
    assert any("redfish report is stale" in r for r in reasons)
    assert "in an active wave of rollout r7" in reasons
    assert "bmc: runs b0, job needs b1" in reasons


def test_unknown_things_refuse() -> None:
    assert verdict(GOOD, node=None)[1] == ("node is not registered",)
    assert "unknown to inventory" in verdict(GOOD, stack=None)[1][0]
    assert "no versions for profile gb200" in verdict(GOOD, stack={"other": {}})[1][0]
    assert "no agent report yet" in verdict({REDFISH: GOOD[REDFISH]})[1]
    down = {
        **GOOD,
        REDFISH: unreadable(REDFISH, 2, NOW, "connection reset").after_failure(GOOD[REDFISH]),
    }
    assert any("unreadable since" in r and "connection reset" in r for r in verdict(down)[1])


def test_firmware_only_stacks_need_no_agent() -> None:
    assert verdict({REDFISH: GOOD[REDFISH]}, stack={"gb200": FIRMWARE}) == (True, ())


def test_unfit_drift_refuses_whatever_the_stack() -> None:
    node_pin = Pin("ams1", ScopeSelector(), H, STACK, 1, NOW)
    broken = {**GOOD, AGENT: obs(AGENT, IN_BAND, loaded_module="595.58.03")}
    items = evaluate(NODE, broken, node_pin, RolloutFacts(), today=NOW.date(), rules=RULES)
    assert DriftKind.GSP_MISMATCH in {i.kind for i in items}
    admitted, reasons = verdict(broken, drift=items)
    assert not admitted and any(r.startswith("gsp_mismatch") for r in reasons)


def test_in_band_components_are_not_missing_before_the_first_agent_report() -> None:
    node_pin = Pin("ams1", ScopeSelector(), H, STACK, 1, NOW)
    only_bmc = {REDFISH: GOOD[REDFISH]}
    assert evaluate(NODE, only_bmc, node_pin, RolloutFacts(), today=NOW.date(), rules=RULES) == ()
    no_driver = {**GOOD, AGENT: obs(AGENT, {C.CUDA: "13.0", C.GPU_GSP: "580.65.06"})}
    items = evaluate(NODE, no_driver, node_pin, RolloutFacts(), today=NOW.date(), rules=RULES)
    assert (C.DRIVER, DriftKind.MISSING) in {(i.component, i.kind) for i in items}


def test_a_recorded_rollout_step_explains_a_difference() -> None:
    node_pin = Pin("ams1", ScopeSelector(), H, {"gb200": FIRMWARE}, 1, NOW)
    moved = {REDFISH: obs(REDFISH, {**FIRMWARE, C.BMC: "b2"})}
    unexplained = evaluate(NODE, moved, node_pin, RolloutFacts(), today=NOW.date(), rules=RULES)
    explained = evaluate(
        NODE, moved, node_pin, RolloutFacts(recorded={C.BMC: "b2"}), today=NOW.date(), rules=RULES
    )
    assert [str(i.kind) for i in unexplained] == ["unexpected"]
    assert [(str(i.kind), str(i.severity)) for i in explained] == [("pending", "warning")]


def test_a_bmc_never_readable_is_unreadable_not_missing_everything() -> None:
    node_pin = Pin("ams1", ScopeSelector(), H, {"gb200": FIRMWARE}, 1, NOW)
    never = {REDFISH: unreadable(REDFISH, 1, NOW, "connection refused")}
    assert evaluate(NODE, never, node_pin, RolloutFacts(), today=NOW.date(), rules=RULES) == ()
    assert any("unreadable since" in r for r in verdict(never, stack={"gb200": FIRMWARE})[1])
