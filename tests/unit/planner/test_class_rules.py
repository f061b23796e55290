"""What each change class allows: one-way components, tested reverts, the standard window,
approvals."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from lockstep_common.vocabulary import ChangeClass
from lockstep_planner.domain.class_rules import approval_shortfall, bundle_refusals
from lockstep_planner.domain.fleet import BundleComponent, ComponentKind

from .fleets import component, policy

pytestmark = pytest.mark.unit
DRIVER_580 = {"driver": "580.65.06", "gpu_gsp": "580.65.06", "fabric_manager": "580.65.06"}


def refusals(
    change_class: ChangeClass,
    *components: BundleComponent,
    current: Mapping[str, str] | None = DRIVER_580,
    tested_revert: bool = False,
) -> list[str]:
    return bundle_refusals(
        change_class,
        policy(change_class),
        components,
        current=current,
        tested_revert=tested_revert,
    )


@pytest.mark.parametrize("kind", [ComponentKind.ONE_WAY_FIRMWARE, ComponentKind.PSU_BBU])
def test_one_way_components_need_the_power_fabric_class(kind: ComponentKind) -> None:
    psu = component("psu", kind)
    assert refusals(ChangeClass.ROUTINE, psu) == [
        "change class routine does not allow one-way components (psu); use a class that does "
        "(power_fabric)"
    ]
    assert refusals(ChangeClass.POWER_FABRIC, psu) == []


def test_switch_and_ab_firmware_are_routine() -> None:
    assert (
        refusals(
            ChangeClass.ROUTINE,
            component("nvswitch", ComponentKind.FABRIC_SWITCH),
            component("bmc", ComponentKind.AB_FIRMWARE),
        )
        == []
    )


def test_emergency_needs_a_tested_revert_before_the_first_push() -> None:
    driver = component("driver", version="580.95.05")
    assert refusals(ChangeClass.EMERGENCY, driver) == [
        "change class emergency requires a tested revert before the first push"
    ]
    assert refusals(ChangeClass.EMERGENCY, driver, tested_revert=True) == []


def test_standard_allows_a_driver_minor_within_the_pinned_branch() -> None:
    moved = [component(c, version="580.95.05") for c in DRIVER_580]
    assert refusals(ChangeClass.STANDARD, *moved) == []


def test_standard_refuses_a_branch_change_firmware_and_other_components_naming_each() -> None:
    reasons = refusals(
        ChangeClass.STANDARD,
        component("driver", version="590.44.01"),
        component("bmc", ComponentKind.AB_FIRMWARE, version="1.2"),
        component("kernel", version="6.8"),
        component("fabric_manager", version="580.65.06"),  # unchanged: not judged
    )
    assert reasons == [
        "driver 580.65.06 -> 590.44.01: leaves the pinned branch; only changes within it are "
        "pre-approved as standard",
        "bmc (absent) -> 1.2: ab_firmware components are outside the standard window",
        "kernel (absent) -> 6.8: kernel is outside the standard window",
    ]


def test_standard_cannot_be_judged_without_the_pinned_versions() -> None:
    assert refusals(ChangeClass.STANDARD, component("driver"), current=None) == [
        "change class standard: the pinned versions are unknown, so the window cannot be checked"
    ]


def test_approvals_count_and_distinct_approvers() -> None:
    routine, power = policy(ChangeClass.ROUTINE), policy(ChangeClass.POWER_FABRIC)
    assert approval_shortfall(ChangeClass.ROUTINE, routine, []) == (
        "change class routine needs 1 approvals; the plan has 0"
    )
    assert approval_shortfall(ChangeClass.ROUTINE, routine, ["ana"]) is None
    assert approval_shortfall(ChangeClass.POWER_FABRIC, power, ["ana", "ana"]) == (
        "change class power_fabric needs 2 distinct approvers; the plan has 1"
    )
    assert approval_shortfall(ChangeClass.POWER_FABRIC, power, ["ana", "bo"]) is None
    assert approval_shortfall(ChangeClass.STANDARD, policy(ChangeClass.STANDARD), []) is None
