"""The flip-back each BMC profile can do, against the simulator's dialect of it: Supermicro's
backup bank runs again through the BMC Manager's ``Links.ActiveSoftwareImage`` and its reset
(``lockstep_redfish.flip_back``), with exactly those writes in the BMC's ledger; a backup that
does not hold the previous version is refused with nothing written."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from lockstep_common.vocabulary import Component, RollbackMechanism
from lockstep_redfish import BmcTarget, RedfishClient, RetryPolicy
from lockstep_redfish.errors import UpdateRefused
from lockstep_redfish.flip_back import keeps_previous_image, mechanism_for, run_inactive
from lockstep_redfish.preflight import UpdateRequest
from lockstep_redfish.profile import profile_named, shipped_profiles
from lockstep_redfish.tasks import TaskPolicy
from lockstep_redfish.update import FirmwareUpdate, UpdatePolicy
from lockstep_sim.options import DEFAULT_PASSWORD, OPERATOR_USERNAME, SimOptions
from lockstep_sim.profiles import HGX_H100
from lockstep_sim.simulator import Simulator
from tests.integration.sim.test_redfish import _form

from .conftest import AUTH, wait_task
from .pldm_fixtures import package_for

pytestmark = pytest.mark.integration
NODE = "node-00000"
FW = "/redfish/v1/UpdateService/FirmwareInventory"
MANAGER = "/redfish/v1/Managers/1"
NEW = "99.99.99"
FAST = UpdatePolicy(tasks=TaskPolicy(poll_s=0.01), read_poll_s=0.01, settle_s=2.0)


class Credentials:
    def get(self, node_id: str) -> tuple[str, str]:
        return OPERATOR_USERNAME, DEFAULT_PASSWORD


@pytest.fixture
async def smc() -> AsyncIterator[Simulator]:
    sim = Simulator(
        SimOptions(
            1,
            "hgx-h100",
            dialect="supermicro-x13",
            host_base="127.79.0.1",
            port=0,
            time_scale=0.002,
        )
    )
    await sim.start()
    yield sim
    await sim.stop()


async def _get(sim: Simulator, path: str) -> dict[str, Any]:
    """``path`` once the BMC answers (it refuses connections for a moment after its reset)."""
    for _ in range(500):
        try:
            async with (
                aiohttp.ClientSession(headers=AUTH) as http,
                http.get(sim.bmc_url(NODE) + path) as r,
            ):
                assert r.status == 200, path
                body: dict[str, Any] = await r.json()
                return body
        except aiohttp.ClientError:
            await asyncio.sleep(0.01)
    raise AssertionError(f"{path}: the BMC did not answer")


async def _flash_new_bmc(sim: Simulator) -> str:
    """The forward update as the profile does it (push to Managers/1, Manager.Reset); the
    version it ran before."""
    profile = profile_named("supermicro-x13")
    host_bmc = next(c for c in HGX_H100 if c.kind == "host_bmc")
    params = {"Targets": [MANAGER], **profile.push.parameters}
    async with aiohttp.ClientSession(headers=AUTH) as http:
        url = sim.bmc_url(NODE) + "/redfish/v1/UpdateService/upload"
        async with http.post(url, data=_form(package_for(host_bmc, NEW), json.dumps(params))) as r:
            assert r.status == 202, await r.text()
            assert (await wait_task(http, sim.bmc_url(NODE) + r.headers["Location"]))[
                "TaskState"
            ] == "Completed"
        reset = sim.bmc_url(NODE) + f"{MANAGER}/Actions/Manager.Reset"
        async with http.post(reset, json={"ResetType": "ForceRestart"}) as r:
            assert r.status == 400  # the capture's Managers/1 allows GracefulRestart only
        async with http.post(reset, json={"ResetType": "GracefulRestart"}) as r:
            assert r.status == 204
    assert (await _get(sim, f"{FW}/BMC"))["Version"] == NEW
    return host_bmc.version


def _writes(sim: Simulator, since: int) -> list[tuple[str, Any]]:
    return [
        (e["action"], e.get("links") or e.get("reset_type"))
        for e in sim.bmc(NODE).ledger[since:]
        if e["action"] not in {"session_create", "session_delete"}
    ]


def test_only_a_profile_with_an_inactive_inventory_bank_keeps_the_previous_image() -> None:
    expected = {
        "dmtf-generic": RollbackMechanism.REFLASH,
        "nvidia-gb200-nvl": RollbackMechanism.REFLASH,  # CommitImage/background copy overwrite it
        "nvidia-hgx": RollbackMechanism.REFLASH,
        "supermicro-x13": RollbackMechanism.INACTIVE_IMAGE,
    }
    assert {i: mechanism_for(profile_named(i)) for i in expected} == expected
    assert [p.id for p in shipped_profiles() if keeps_previous_image(p)] == ["supermicro-x13"]
    smc = profile_named("supermicro-x13")
    assert [c for c in Component if keeps_previous_image(smc, c)] == [Component.BMC, Component.BIOS]


async def test_a_supermicro_flip_back_runs_the_backup_bank_through_active_software_image(
    smc: Simulator,
) -> None:
    old = await _flash_new_bmc(smc)
    manager = await _get(smc, MANAGER)
    assert manager["Links"]["ActiveSoftwareImage"] == {"@odata.id": f"{FW}/BMC"}
    assert (await _get(smc, f"{FW}/Backup_BMC"))["Version"] == old
    since = len(smc.bmc(NODE).ledger)
    profile = profile_named("supermicro-x13")
    client = RedfishClient(Credentials(), RetryPolicy(timeout_s=5))
    async with client.session(BmcTarget(NODE, smc.bmc_url(NODE), allow_plain_http=True)) as bmc:
        update = FirmwareUpdate(bmc, FAST)
        assert await run_inactive(update, profile, {f"{FW}/BMC": old}) == []  # reset: 204
        await update.wait_reachable()
        after = await update.verify(UpdateRequest((f"{FW}/BMC",), old), {f"{FW}/BMC": NEW})
    assert after == {f"{FW}/BMC": old}
    assert (await _get(smc, f"{FW}/Backup_BMC"))["Version"] == NEW  # the image it left
    chosen = {"ActiveSoftwareImage": {"@odata.id": f"{FW}/Backup_BMC"}}
    assert _writes(smc, since) == [("patch", chosen), ("Manager.Reset", "GracefulRestart")]


async def test_a_backup_without_the_previous_version_is_refused_with_nothing_written(
    smc: Simulator,
) -> None:
    await _flash_new_bmc(smc)
    since = len(smc.bmc(NODE).ledger)
    client = RedfishClient(Credentials(), RetryPolicy(timeout_s=5))
    async with client.session(BmcTarget(NODE, smc.bmc_url(NODE), allow_plain_http=True)) as bmc:
        update = FirmwareUpdate(bmc, FAST)
        with pytest.raises(UpdateRefused, match=r"BMC: no inactive image at 0\.0\.1"):
            await run_inactive(update, profile_named("supermicro-x13"), {f"{FW}/BMC": "0.0.1"})
    assert _writes(smc, since) == []
    assert (await _get(smc, f"{FW}/BMC"))["Version"] == NEW


async def test_active_software_image_takes_only_one_of_the_managers_images(
    smc: Simulator,
) -> None:
    wrong: tuple[dict[str, Any], ...] = (
        {"ActiveSoftwareImage": {"@odata.id": f"{FW}/Golden_BMC"}},  # not listed here
        {"ActiveSoftwareImage": "BMC"},
        {"ManagerForServers": []},
    )
    async with aiohttp.ClientSession(headers=AUTH) as http:
        for links in wrong:
            async with http.patch(smc.bmc_url(NODE) + MANAGER, json={"Links": links}) as r:
                assert r.status == 400, links
    assert (await _get(smc, MANAGER))["Links"]["ActiveSoftwareImage"] == {"@odata.id": f"{FW}/BMC"}


async def test_a_flip_back_interrupted_after_its_patch_sends_only_the_reset_and_then_nothing(
    smc: Simulator,
) -> None:
    """Asked again after a worker died between the PATCH and the reset, the flip-back reads
    first: the Manager already names the backup, so only the reset is sent; asked once more,
    the BMC runs the previous version and nothing is sent."""
    old = await _flash_new_bmc(smc)
    chosen = {"ActiveSoftwareImage": {"@odata.id": f"{FW}/Backup_BMC"}}
    async with (
        aiohttp.ClientSession(headers=AUTH) as http,
        http.patch(smc.bmc_url(NODE) + MANAGER, json={"Links": chosen}) as r,
    ):
        assert r.status == 200
    since = len(smc.bmc(NODE).ledger)
    profile = profile_named("supermicro-x13")
    client = RedfishClient(Credentials(), RetryPolicy(timeout_s=5))
    async with client.session(BmcTarget(NODE, smc.bmc_url(NODE), allow_plain_http=True)) as bmc:
        update = FirmwareUpdate(bmc, FAST)
        await run_inactive(update, profile, {f"{FW}/BMC": old})
        await update.wait_reachable()
        assert _writes(smc, since) == [("Manager.Reset", "GracefulRestart")]
        assert (await _get(smc, f"{FW}/BMC"))["Version"] == old
        again = len(smc.bmc(NODE).ledger)
        assert await run_inactive(update, profile, {f"{FW}/BMC": old}) == []
    assert _writes(smc, again) == []
