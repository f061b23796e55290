"""The planner judges a rollout's target stack by the inventory's compatibility rules
(issue 10, deliverable 2): a rule the target breaks refuses the intent, naming it; a node the
target repairs is moved; a problem the target neither causes nor repairs is not the target's."""

from __future__ import annotations

import datetime as dt

import pytest

from lockstep_common.compatibility.files import packaged_rules
from lockstep_common.events.v1 import DriftItem, FleetNode
from lockstep_common.vocabulary import Component, DriftKind, Severity
from lockstep_planner.domain.compatibility import TargetCheck, check_target
from lockstep_planner.domain.intake import is_drifted
from lockstep_planner.testing.kit import fleet_node

pytestmark = pytest.mark.unit
TODAY = dt.date(2026, 11, 24)
R580 = "580.95.05"


def node(i: int, **observed: str) -> FleetNode:
    return fleet_node(i, observed={Component(c): v for c, v in observed.items()})


def check(nodes: list[FleetNode], target: dict[str, dict[str, str]]) -> TargetCheck:
    return check_target(nodes, target, rules=packaged_rules(), today=TODAY)


def test_a_target_that_breaks_gsp_equals_driver_is_refused_naming_the_rule_and_nodes() -> None:
    nodes = [node(i, driver=R580, gpu_gsp=R580) for i in range(3)]
    result = check(nodes, {"gb200": {"driver": "580.105.08"}})  # the driver alone moves
    [reason] = result.refusals
    assert "3 gb200 node(s) (n000, n001, n002)" in reason
    assert "gpu_gsp 580.95.05 != driver 580.105.08" in reason


def test_a_cuda_the_driver_cannot_run_is_refused() -> None:
    nodes = [node(0, driver="570.124.06", gpu_gsp="570.124.06", cuda="12.8.1")]
    reasons = check(nodes, {"gb200": {"cuda": "13.0.0"}}).refusals
    assert any("CUDA 13.0.0 needs driver >= 580" in r for r in reasons), reasons


def test_moving_back_to_an_end_of_life_branch_is_refused() -> None:
    nodes = [node(0, driver=R580, gpu_gsp=R580)]
    target = {"gb200": {"driver": "570.124.06", "gpu_gsp": "570.124.06"}}
    [reason] = check(nodes, target).refusals
    assert "R570 (production) reached end of life on 2026-02-28" in reason


def test_a_minor_inside_an_end_of_life_branch_is_not_made_worse_so_not_refused() -> None:
    nodes = [node(0, driver="570.86.10", gpu_gsp="570.86.10")]
    target = {"gb200": {"driver": "570.124.06", "gpu_gsp": "570.124.06"}}
    assert check(nodes, target).refusals == ()


def test_a_gsp_mismatch_the_target_repairs_makes_the_node_movable() -> None:
    mismatched = node(0, driver=R580, gpu_gsp="580.65.06")
    kept = node(1, driver=R580, gpu_gsp="580.65.06")
    result = check([mismatched], {"gb200": {"driver": R580, "gpu_gsp": R580}})
    assert result.refusals == () and result.remedied == {"n000"}
    # A bundle moving only firmware leaves the mismatch: the node stays out.
    assert check([kept], {"gb200": {"bmc": "1.2"}}).remedied == frozenset()


def test_only_nodes_of_a_profile_the_target_pins_are_judged() -> None:
    other = fleet_node(0, profile="h100", observed={Component.DRIVER: R580})
    result = check([other], {"gb200": {"driver": "580.105.08"}})
    assert result.refusals == () and result.remedied == frozenset()


def item(kind: DriftKind) -> DriftItem:
    return DriftItem(
        component=Component.GPU_GSP,
        expected=R580,
        actual="580.65.06",
        kind=kind,
        severity=Severity.CRITICAL,
    )


@pytest.mark.parametrize(
    ("kinds", "remedied", "drifted"),
    [
        ((DriftKind.GSP_MISMATCH,), True, False),
        ((DriftKind.INCOMPATIBLE,), True, False),
        ((DriftKind.GSP_MISMATCH,), False, True),
        ((DriftKind.UNEXPECTED, DriftKind.INCOMPATIBLE), True, True),
        ((DriftKind.PENDING,), False, False),
        ((), False, False),
    ],
)
def test_only_incompatibility_the_target_repairs_lets_a_drifted_node_move(
    kinds: tuple[DriftKind, ...], remedied: bool, drifted: bool
) -> None:
    n = fleet_node(0, drift=tuple(item(k) for k in kinds))
    assert is_drifted(n, remedied=remedied) is drifted
