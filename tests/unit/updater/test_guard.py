"""The executor's blast-radius check (domain/guard.py) and the member table (domain/targets.py)."""

from __future__ import annotations

import dataclasses

import pytest

from lockstep_common.vocabulary import Component
from lockstep_inventory.domain.members import map_member
from lockstep_redfish.profile import profile_named
from lockstep_sim.profiles import PROFILE_CLASSES
from lockstep_updater.domain.guard import (
    Decision,
    Facts,
    Verdict,
    decide,
    outside_plan,
    outside_wave,
)
from lockstep_updater.domain.targets import component_of, targets_for

pytestmark = pytest.mark.unit
OK = Facts(
    node_id="node-1",
    halted=None,
    wave_released=True,
    in_wave=True,
    in_plan=True,
    failures=0,
    failure_budget=1,
    pool="p0",
    others_out=1,
    max_unavailable=2,
)


def test_a_node_of_the_wave_and_the_plan_within_budget_proceeds() -> None:
    assert decide(OK, takes_out_of_service=True).verdict is Verdict.PROCEED


@pytest.mark.parametrize(
    ("change", "verdict", "reason"),
    [
        ({"halted": "gate: xid 79"}, Verdict.HALT, "rollout halted: gate: xid 79"),
        ({"wave_released": False}, Verdict.REFUSE, "the wave was not released"),
        ({"node_id": "node-3", "in_wave": False}, Verdict.REFUSE, "node-3 is not in the wave"),
        ({"in_plan": None}, Verdict.REFUSE, "no approved plan"),
        ({"in_plan": False}, Verdict.REFUSE, "node-1 is not in the approved"),
        (
            {"wave": 1, "approved_wave": 0},
            Verdict.REFUSE,
            "node-1 is approved for wave 0, not wave 1",
        ),
        ({"failures": 2}, Verdict.HALT, "wave failure budget spent: 2 failed > 1"),
        ({"others_out": 2}, Verdict.WAIT, "pool p0 has 2 node(s) out of service"),
    ],
)
def test_each_fact_that_forbids_the_action_says_so(
    change: dict[str, object], verdict: Verdict, reason: str
) -> None:
    decision = decide(dataclasses.replace(OK, **change), takes_out_of_service=True)  # type: ignore[arg-type]
    assert decision.verdict is verdict
    assert decision.reason.startswith(reason)


def test_the_pool_budget_does_not_hold_back_staging_into_an_inactive_bank() -> None:
    full = dataclasses.replace(OK, others_out=5)
    assert decide(full, takes_out_of_service=False).verdict is Verdict.PROCEED


def test_a_halt_outranks_every_other_reason() -> None:
    worst = dataclasses.replace(OK, halted="abort", node_id="stranger", others_out=9)
    assert decide(worst, takes_out_of_service=True).verdict is Verdict.HALT


def test_outside_plan_keeps_the_wave_order() -> None:
    assert outside_plan(("n3", "n1", "n9"), frozenset({"n1"})) == ("n3", "n9")


def test_outside_wave_names_the_nodes_the_plan_approved_for_another_wave() -> None:
    approved = {"n1": 0, "n2": 0, "n3": 1, "n4": 1}
    assert outside_wave(1, ("n3", "n1", "n4", "n2"), approved) == ("n1", "n2")
    assert outside_wave(1, ("n3", "n4", "n9"), approved) == ()  # n9: outside_plan's concern


FW = "/redfish/v1/UpdateService/FirmwareInventory"
GB200_MEMBERS = [
    f"{FW}/{m}"
    for m in (
        "HGX_FW_GPU_0", "HGX_FW_GPU_1", "HGX_InfoROM_GPU_0", "FW_BMC_0", "HGX_FW_BMC_0",
        "FW_ERoT_BMC_0", "CX7_0", "PSU_0", "HGX_FW_CPLD_0", "UEFI",
    )
]  # fmt: skip


def test_targets_are_the_members_of_the_component_only() -> None:
    assert targets_for(Component.GPU_VBIOS, GB200_MEMBERS) == (
        f"{FW}/HGX_FW_GPU_0",
        f"{FW}/HGX_FW_GPU_1",
    )
    assert targets_for(Component.BMC, GB200_MEMBERS) == (f"{FW}/FW_BMC_0", f"{FW}/HGX_FW_BMC_0")
    assert targets_for(Component.DRIVER, GB200_MEMBERS) == ()  # in-band: no Redfish member


SIM_MEMBERS = sorted({m for classes in PROFILE_CLASSES.values() for c in classes for m in c.ids})


@pytest.mark.parametrize("member", SIM_MEMBERS)
def test_the_profiles_classify_members_as_the_inventory_does(member: str) -> None:
    theirs = map_member(profile_named("lockstep-sim"), member).component
    assert component_of(member) == theirs


def test_a_closed_maintenance_window_holds_only_the_start_of_a_nodes_work() -> None:
    shut = dataclasses.replace(OK, window_closed="pool p0 is outside its maintenance windows")
    waits = decide(shut, takes_out_of_service=True, starts_work=True)
    assert waits == Decision(Verdict.WAIT, "pool p0 is outside its maintenance windows")
    assert decide(shut, takes_out_of_service=False, starts_work=True).verdict is Verdict.WAIT
    # Work begun goes on (activation, verify, give back), and a rollback is never held.
    assert decide(shut, takes_out_of_service=True).verdict is Verdict.PROCEED
    rollback = decide(shut, takes_out_of_service=True, starts_work=True, rollback=True)
    assert rollback.verdict is Verdict.PROCEED
    # A halt still outranks it.
    halted = dataclasses.replace(shut, halted="gate tripped")
    assert decide(halted, takes_out_of_service=True, starts_work=True).verdict is Verdict.HALT
