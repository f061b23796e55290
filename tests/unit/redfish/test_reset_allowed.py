"""Whether a BMC takes a reset type (``FirmwareUpdate.reset_action``, asked by preflight before
any drain): the action's ``ResetType@Redfish.AllowableValues``, else the ``AllowableValues`` of
its ``@Redfish.ActionInfo`` (DSP0266 "Allowable values"), else what the schema allows."""

from __future__ import annotations

from typing import Any

import pytest

from lockstep_redfish.errors import UpdateRefused
from lockstep_redfish.update import FirmwareUpdate
from tests.unit.redfish.fakes import ScriptedBmc, reply

pytestmark = pytest.mark.unit
MANAGER = "/redfish/v1/Managers/1"
INFO = "/redfish/v1/Managers/1/ResetActionInfo"


def manager(**action: Any) -> dict[str, Any]:
    target = {"target": f"{MANAGER}/Actions/Manager.Reset", **action}
    return {"@odata.id": MANAGER, "Actions": {"#Manager.Reset": target}}


def info(*values: str) -> dict[str, Any]:
    return {
        "@odata.id": INFO,
        "Parameters": [
            {"Name": "Other", "AllowableValues": ["GracefulRestart"]},
            {"Name": "ResetType", "Required": True, "AllowableValues": list(values)},
        ],
    }


async def test_the_action_info_says_which_reset_types_the_bmc_takes() -> None:
    bmc = ScriptedBmc(
        reply(200, manager(**{"@Redfish.ActionInfo": INFO})), reply(200, info("ForceRestart"))
    )
    with pytest.raises(UpdateRefused, match=r"'GracefulRestart' not allowed \(ForceRestart\)"):
        await FirmwareUpdate(bmc).reset_action(MANAGER, "GracefulRestart")
    assert [(m, p) for m, p, _ in bmc.requests] == [("GET", MANAGER), ("GET", INFO)]
    bmc = ScriptedBmc(
        reply(200, manager(**{"@Redfish.ActionInfo": INFO})), reply(200, info("ForceRestart"))
    )
    await FirmwareUpdate(bmc).reset_action(MANAGER, "ForceRestart")


async def test_allowable_values_on_the_action_are_read_first_and_nothing_is_written() -> None:
    allowed = {"ResetType@Redfish.AllowableValues": ["GracefulRestart"]}
    bmc = ScriptedBmc(reply(200, manager(**allowed, **{"@Redfish.ActionInfo": INFO})))
    with pytest.raises(UpdateRefused, match=r"'ForceRestart' not allowed \(GracefulRestart\)"):
        await FirmwareUpdate(bmc).reset_action(MANAGER, "ForceRestart")
    assert [m for m, _, _ in bmc.requests] == ["GET"]


async def test_a_resource_without_a_reset_action_or_listing_none_of_its_values() -> None:
    bmc = ScriptedBmc(reply(200, {"@odata.id": MANAGER, "Actions": {}}))
    with pytest.raises(UpdateRefused, match="offers no Reset action"):
        await FirmwareUpdate(bmc).reset_action(MANAGER, "GracefulRestart")
    bmc = ScriptedBmc(reply(200, manager()))  # lists nothing: what the schema allows
    await FirmwareUpdate(bmc).reset_action(MANAGER, "GracefulRestart")
