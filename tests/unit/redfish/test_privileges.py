"""Least privilege per BMC profile (DSP8011): the privileges an update needs follow the
profile's calls (its push, its activation reset, how it flips back), and an account is refused,
in one line, when it lacks one or holds an administrative privilege those calls do not need."""

from __future__ import annotations

import pytest

from lockstep_redfish.privileges import account_refusal, needed_privileges
from lockstep_redfish.profile import BmcProfile, profile_named

pytestmark = pytest.mark.unit
# The predefined roles (DSP0266 "Privilege model"; the simulator's Role resources).
ADMINISTRATOR = [
    "Login",
    "ConfigureManager",
    "ConfigureUsers",
    "ConfigureSelf",
    "ConfigureComponents",
]
OPERATOR = ["Login", "ConfigureSelf", "ConfigureComponents"]
READ_ONLY = ["Login", "ConfigureSelf"]
FIRMWARE_OPERATOR = [*OPERATOR, "ConfigureManager"]  # a custom role: no ConfigureUsers
GB200, HGX = profile_named("nvidia-gb200-nvl"), profile_named("nvidia-hgx")
SUPERMICRO, GENERIC = profile_named("supermicro-x13"), profile_named("dmtf-generic")


@pytest.mark.parametrize(
    ("profile", "needed"),
    [
        (GB200, {"Login", "ConfigureComponents"}),  # Chassis.Reset PowerCycle, CommitImage
        (HGX, {"Login", "ConfigureComponents"}),  # ComputerSystem.Reset ForceRestart
        (GENERIC, {"Login", "ConfigureComponents"}),
        (profile_named("lockstep-sim"), {"Login", "ConfigureComponents"}),  # Activate
        (SUPERMICRO, {"Login", "ConfigureComponents", "ConfigureManager"}),  # Manager.Reset
    ],
)
def test_the_needed_set_follows_the_profiles_calls(profile: BmcProfile, needed: set[str]) -> None:
    assert set(needed_privileges(profile)) == needed


def test_each_needed_privilege_names_the_calls_that_need_it() -> None:
    needs = needed_privileges(SUPERMICRO)
    assert needs["ConfigureManager"] == (
        "Manager.Reset of /redfish/v1/Managers/1",
        "the flip-back's PATCH of a Manager's image link",
    )
    assert (
        "ComputerSystem.Reset of /redfish/v1/Systems/*"
        in needed_privileges(HGX)["ConfigureComponents"]
    )


def test_an_operator_may_flash_where_the_profile_needs_no_more() -> None:
    for profile in (GB200, HGX, GENERIC):
        assert account_refusal(profile, OPERATOR, ["Operator"]) is None


def test_supermicro_refuses_the_operator_role_naming_manager_reset() -> None:
    assert account_refusal(SUPERMICRO, OPERATOR, ["Operator"]) == (
        "the account (Operator) lacks what the profile's calls need (DSP8011: ConfigureManager "
        "for Manager.Reset of /redfish/v1/Managers/1, the flip-back's PATCH of a Manager's "
        "image link; it holds: ConfigureComponents, ConfigureSelf, Login)"
    )
    assert account_refusal(SUPERMICRO, FIRMWARE_OPERATOR, ["FirmwareOperator"]) is None


def test_configure_manager_the_profile_does_not_need_is_refused() -> None:
    reason = account_refusal(GB200, FIRMWARE_OPERATOR, ["FirmwareOperator"])
    assert reason == (
        "the account (FirmwareOperator) holds ConfigureManager, more than the profile's calls "
        "need: Administrator-class credentials are refused; use an account whose role holds "
        "only ConfigureComponents, Login"
    )


@pytest.mark.parametrize("profile", [GB200, SUPERMICRO])
def test_configure_users_is_never_needed_and_always_refused(profile: BmcProfile) -> None:
    reason = account_refusal(profile, ADMINISTRATOR, ["Administrator"])
    assert reason is not None and "(Administrator) holds " in reason
    assert "ConfigureUsers, more than the profile's calls need" in reason


def test_privileges_of_several_roles_add_up() -> None:
    assert account_refusal(GB200, [*OPERATOR, "ConfigureUsers"], ["Operator", "Extra"]) is not None
    assert account_refusal(SUPERMICRO, [*OPERATOR, "ConfigureManager"], ["Operator", "M"]) is None


def test_unreadable_or_empty_privileges_are_refused() -> None:
    assert account_refusal(GB200, None) == (
        "the account's privileges cannot be read; the profile's calls need "
        "ConfigureComponents, Login"
    )
    reason = account_refusal(GB200, [], [])
    assert reason is not None and "it holds: none" in reason
    assert account_refusal(HGX, READ_ONLY, ["ReadOnly"]) is not None
