"""The privilege each write of a flip-back needs (the DSP8011 privilege registry): a Manager's
PATCH and actions need ConfigureManager, a system's Bios or a chassis ConfigureComponents; an
account lacking one, or whose privileges cannot be read, is refused in one line."""

from __future__ import annotations

import pytest

from lockstep_redfish.preflight import write_privilege, write_refusals

pytestmark = pytest.mark.unit
HEAD = "BMC n1 (profile supermicro-x13)"
MANAGER, BIOS = "/redfish/v1/Managers/1", "/redfish/v1/Systems/1/Bios"
OPERATOR = frozenset({"Login", "ConfigureSelf", "ConfigureComponents"})


def test_each_write_needs_the_registrys_privilege() -> None:
    assert write_privilege(MANAGER) == "ConfigureManager"
    assert write_privilege(BIOS) == "ConfigureComponents"
    assert write_privilege("/redfish/v1/Chassis/BMC_0") == "ConfigureComponents"


def test_an_account_lacking_one_is_refused_in_one_line_naming_what_and_where() -> None:
    (line,) = write_refusals(HEAD, [MANAGER, BIOS], OPERATOR, "the flip-back")
    assert line == (
        f"{HEAD}: the account lacks what the flip-back needs (DSP8011: ConfigureManager for "
        f"{MANAGER}; it holds: ConfigureComponents, ConfigureSelf, Login)"
    )
    assert write_refusals(HEAD, [BIOS], OPERATOR, "the flip-back") == []
    assert write_refusals(HEAD, [MANAGER], OPERATOR | {"ConfigureManager"}, "it") == []


def test_privileges_that_cannot_be_read_are_refused() -> None:
    (line,) = write_refusals(HEAD, [MANAGER, BIOS], None, "the flip-back")
    assert line == (
        f"{HEAD}: the account's privileges cannot be read; the flip-back needs "
        "ConfigureComponents, ConfigureManager"
    )
