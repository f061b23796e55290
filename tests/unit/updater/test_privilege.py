"""Which BMC accounts the updater flashes with (reliability.md 7 H5): Operator-class only."""

from __future__ import annotations

import pytest

from lockstep_updater.domain.privilege import account_refusal

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


def test_an_operator_account_may_flash() -> None:
    assert account_refusal(["Operator"], OPERATOR) is None


def test_an_administrator_account_is_refused_with_what_to_use_instead() -> None:
    reason = account_refusal(["Administrator"], ADMINISTRATOR)
    assert reason is not None
    assert "(Administrator) holds ConfigureManager and ConfigureUsers" in reason
    assert "Operator-class account" in reason


@pytest.mark.parametrize("extra", ["ConfigureManager", "ConfigureUsers"])
def test_a_custom_role_with_either_administrative_privilege_is_refused(extra: str) -> None:
    reason = account_refusal(["FirmwareAdmin"], [*OPERATOR, extra])
    assert reason is not None and f"(FirmwareAdmin) holds {extra}:" in reason


def test_privileges_of_several_roles_add_up() -> None:
    assert account_refusal(["Operator", "Extra"], [*OPERATOR, "ConfigureUsers"]) is not None


def test_an_account_that_cannot_update_components_is_refused() -> None:
    assert account_refusal(["ReadOnly"], READ_ONLY) == (
        "the BMC account (ReadOnly) lacks ConfigureComponents, which a firmware update needs"
    )
    assert "(no role) lacks" in (account_refusal([], []) or "")
