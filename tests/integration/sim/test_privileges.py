"""The simulator enforces the Redfish privilege registry (DSP8011) on what it serves, so the
updater's least-privilege refusals are tested against a BMC that would refuse the same calls:
a Manager's actions and PATCH need ConfigureManager, accounts ConfigureUsers. The account
Lockstep flashes with holds what its dialect's update calls need and no more."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from lockstep_sim.options import DEFAULT_PASSWORD, OPERATOR_USERNAME, SimOptions
from lockstep_sim.simulator import Simulator

pytestmark = pytest.mark.integration
NODE = "node-00000"
BASIC = base64.b64encode(f"{OPERATOR_USERNAME}:{DEFAULT_PASSWORD}".encode()).decode()


@pytest.fixture
async def smc() -> AsyncIterator[Simulator]:
    options = SimOptions(1, "hgx-h100", dialect="supermicro-x13", host_base="127.76.0.1", port=0)
    async with Simulator(options) as simulator:
        yield simulator


@pytest.fixture
async def operator() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(headers={"Authorization": f"Basic {BASIC}"}) as http:
        yield http


async def _role(http: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    async with http.get(f"{url}/redfish/v1/AccountService/Accounts/2") as r:
        account = await r.json()
    assert account["UserName"] == OPERATOR_USERNAME
    async with http.get(f"{url}{account['Links']['Role']['@odata.id']}") as r:
        role: dict[str, Any] = await r.json()
    return role


async def test_the_supermicro_flashing_account_may_reset_the_manager_and_not_make_accounts(
    smc: Simulator, operator: aiohttp.ClientSession
) -> None:
    url = smc.bmc_url(NODE)
    role = await _role(operator, url)
    assert role["Id"] == "FirmwareOperator" and role["IsPredefined"] is False
    assert set(role["AssignedPrivileges"]) == {
        "Login",
        "ConfigureSelf",
        "ConfigureComponents",
        "ConfigureManager",
    }
    body = {"UserName": "mallory", "Password": "mallory-pass-1", "RoleId": "Administrator"}
    async with operator.post(f"{url}/redfish/v1/AccountService/Accounts", json=body) as r:
        assert r.status == 403
        assert "ConfigureUsers privilege is required" in str(await r.json())
    assert smc.bmc(NODE).accounts.by_name("mallory") is None


async def test_an_operator_may_not_reset_or_patch_a_manager(
    smc: Simulator, operator: aiohttp.ClientSession
) -> None:
    account = smc.bmc(NODE).accounts.by_name(OPERATOR_USERNAME)
    assert account is not None
    account.role = "Operator"  # the predefined role: no ConfigureManager
    url = smc.bmc_url(NODE)
    reset = f"{url}/redfish/v1/Managers/1/Actions/Manager.Reset"
    async with operator.post(reset, json={"ResetType": "GracefulRestart"}) as r:
        assert r.status == 403
        assert "ConfigureManager privilege is required" in str(await r.json())
    link = {"Links": {"ActiveSoftwareImage": {"@odata.id": "/x"}}}
    async with operator.patch(f"{url}/redfish/v1/Managers/1", json=link) as r:
        assert r.status == 403
    assert smc.bmc(NODE).ledger == []  # nothing was done, nothing recorded


@pytest.mark.parametrize("dialect", ["lockstep", "nvidia-gb200-nvl", "nvidia-hgx", "dmtf-generic"])
async def test_the_other_dialects_flash_with_the_predefined_operator(
    dialect: str, operator: aiohttp.ClientSession
) -> None:
    options = SimOptions(1, "gb200", dialect=dialect, host_base="127.77.0.1", port=0)
    async with Simulator(options) as sim:
        role = await _role(operator, sim.bmc_url(NODE))
    assert role["Id"] == "Operator" and role["IsPredefined"] is True
