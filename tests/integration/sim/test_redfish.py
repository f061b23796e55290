"""Redfish behaviour of one emulated BMC: sessions, ETags, errors, updates, ledger, $expand."""

from __future__ import annotations

import asyncio
import base64

import aiohttp
import pytest
from aiohttp import web

from lockstep_sim.options import DEFAULT_PASSWORD, DEFAULT_USERNAME, SimOptions
from lockstep_sim.simulator import Simulator

from .conftest import get_json, wait_task
from .pldm_fixtures import GB200_GPU, NEW_GPU_VERSION, package_for

pytestmark = pytest.mark.integration
NODE = "node-00001"
FW = "/redfish/v1/UpdateService/FirmwareInventory"
PUSH = "/redfish/v1/UpdateService/update-multipart"


def _form(image: bytes, params: str = "{}") -> aiohttp.FormData:
    form = aiohttp.FormData()
    form.add_field("UpdateParameters", params, content_type="application/json")
    form.add_field(
        "UpdateFile", image, filename="pkg.fwpkg", content_type="application/octet-stream"
    )
    return form


async def _versions(http: aiohttp.ClientSession, url: str) -> dict[str, str]:
    body = await get_json(http, f"{url}{FW}?$expand=.($levels=1)")
    return {m["Id"]: m["Version"] for m in body["Members"]}


async def test_session_login_use_and_logout(sim: Simulator) -> None:
    url = sim.bmc_url(NODE)
    async with aiohttp.ClientSession() as anon:
        creds = {"UserName": DEFAULT_USERNAME, "Password": DEFAULT_PASSWORD}
        async with anon.post(f"{url}/redfish/v1/SessionService/Sessions", json=creds) as r:
            assert r.status == 201
            token, location = r.headers["X-Auth-Token"], r.headers["Location"]
        headers = {"X-Auth-Token": token}
        async with anon.get(f"{url}/redfish/v1/Systems", headers=headers) as r:
            assert r.status == 200
        async with anon.delete(f"{url}{location}", headers=headers) as r:
            assert r.status == 200
        async with anon.get(f"{url}/redfish/v1/Systems", headers=headers) as r:
            assert r.status == 401
            assert r.headers["WWW-Authenticate"].startswith("Basic")
        bad = {"UserName": DEFAULT_USERNAME, "Password": "wrong"}
        async with anon.post(f"{url}/redfish/v1/SessionService/Sessions", json=bad) as r:
            assert r.status == 401
    actions = [e["action"] for e in sim.bmc(NODE).ledger]
    assert actions == ["session_create", "session_delete", "session_create"]
    assert all(
        "Password" not in str(e) and DEFAULT_PASSWORD not in str(e) for e in sim.bmc(NODE).ledger
    )


async def test_error_bodies(sim: Simulator, http: aiohttp.ClientSession) -> None:
    url = sim.bmc_url(NODE)
    async with http.get(f"{url}/redfish/v1/NoSuchThing") as r:
        assert r.status == 404
        error = (await r.json())["error"]
        assert error["code"] == "Base.1.19.0.ResourceNotFound"
        assert error["@Message.ExtendedInfo"][0]["MessageId"] == error["code"]
    async with http.delete(f"{url}/redfish/v1/Systems") as r:
        assert r.status == 405
        assert "GET" in r.headers["Allow"]
        assert (await r.json())["error"]["code"] == "Base.1.19.0.OperationNotAllowed"
    async with http.patch(f"{url}/redfish/v1/Systems/System_0", data=b"{not json") as r:
        assert r.status == 400
        assert (await r.json())["error"]["code"] == "Base.1.19.0.MalformedJSON"
    async with http.patch(f"{url}/redfish/v1/Systems/System_0", json={"UUID": "x"}) as r:
        assert r.status == 400
        assert (await r.json())["error"]["code"] == "Base.1.19.0.PropertyNotWritable"


async def test_etag_if_match(sim: Simulator, http: aiohttp.ClientSession) -> None:
    url = f"{sim.bmc_url(NODE)}/redfish/v1/Systems/System_0"
    async with http.get(url) as r:
        tag = r.headers["ETag"]
    async with http.patch(url, json={"AssetTag": "a"}, headers={"If-Match": '"stale"'}) as r:
        assert r.status == 412
        assert (await r.json())["error"]["code"] == "Base.1.19.0.PreconditionFailed"
    assert (await get_json(http, url))["AssetTag"] == ""
    async with http.patch(url, json={"AssetTag": "rack-7"}, headers={"If-Match": tag}) as r:
        assert r.status == 200
        assert r.headers["ETag"] != tag
    assert (await get_json(http, url))["AssetTag"] == "rack-7"


async def test_expand_returns_members_inline(sim: Simulator, http: aiohttp.ClientSession) -> None:
    url = sim.bmc_url(NODE)
    for query in ("*", ".($levels=1)"):
        body = await get_json(http, f"{url}{FW}?$expand={query}")
        assert len(body["Members"]) == 30
        assert body["Members"][0]["@odata.type"] == "#SoftwareInventory.v1_13_0.SoftwareInventory"
    plain = await get_json(http, f"{url}{FW}")
    assert set(plain["Members"][0]) == {"@odata.id"}


async def test_push_updates_gpus_and_ledger_once(
    sim: Simulator, http: aiohttp.ClientSession
) -> None:
    url = sim.bmc_url(NODE)
    async with http.post(f"{url}{PUSH}", data=_form(package_for(GB200_GPU, NEW_GPU_VERSION))) as r:
        assert r.status == 202
        monitor = r.headers["Location"]
    task = await wait_task(http, f"{url}{monitor}")
    assert task["TaskState"] == "Completed" and task["PercentComplete"] == 100
    assert task["Messages"][-1]["MessageId"] == "Update.1.3.0.UpdateSuccessful"
    versions = await _versions(http, url)
    assert all(versions[f"HGX_FW_GPU_{i}"] == NEW_GPU_VERSION for i in range(4))
    assert versions["HGX_InfoROM_GPU_0"] == "G548.0201.00.03"
    ledger = await get_json_list(http, f"{sim.base_url}/ledger?node={NODE}")
    assert [e["action"] for e in ledger] == ["update-multipart"]
    assert ledger[0]["plan"] == {f"HGX_FW_GPU_{i}": NEW_GPU_VERSION for i in range(4)}


async def get_json_list(http: aiohttp.ClientSession, url: str) -> list[dict[str, object]]:
    async with http.get(url) as r:
        assert r.status == 200
        body: list[dict[str, object]] = await r.json()
        return body


@pytest.mark.parametrize("image", [b"not a pldm package", None])
async def test_refused_package_leaves_inventory(
    sim: Simulator, http: aiohttp.ClientSession, image: bytes | None
) -> None:
    url = sim.bmc_url(NODE)
    before = await _versions(http, url)
    image = image or package_for(GB200_GPU, NEW_GPU_VERSION, pci_device=0x1234)
    async with http.post(f"{url}{PUSH}", data=_form(image)) as r:
        assert r.status == 400
        code = (await r.json())["error"]["code"]
    assert code in {"Update.1.3.0.VerificationFailed", "Update.1.3.0.UpdateNotApplicable"}
    assert await _versions(http, url) == before
    assert [(e["action"], e["status"]) for e in sim.bmc(NODE).ledger] == [("update-multipart", 400)]


async def test_stage_then_activate_flips_banks(sim: Simulator, http: aiohttp.ClientSession) -> None:
    url = sim.bmc_url(NODE)
    target = f"{FW}/HGX_FW_GPU_2"
    params = f'{{"Targets": ["{target}"], "Stage": true}}'
    async with http.post(
        f"{url}{PUSH}", data=_form(package_for(GB200_GPU, NEW_GPU_VERSION), params)
    ) as r:
        assert r.status == 202
        await wait_task(http, f"{url}{r.headers['Location']}")
    member = await get_json(http, f"{url}{target}")
    assert member["Staged"] is True and member["Version"] == "97.00.6C.00.03"
    component = sim.bmc(NODE).node.components["HGX_FW_GPU_2"]
    assert component.inactive_version == NEW_GPU_VERSION
    body = {"Targets": [{"@odata.id": target}]}
    activate = "/redfish/v1/UpdateService/Actions/UpdateService.Activate"
    async with http.post(f"{url}{activate}", json=body) as r:
        assert r.status == 202
        task = await wait_task(http, f"{url}{r.headers['Location']}")
    assert task["TaskState"] == "Completed"
    member = await get_json(http, f"{url}{target}")
    assert member["Staged"] is False and member["Version"] == NEW_GPU_VERSION
    assert component.inactive_version == "97.00.6C.00.03"
    assert (await get_json(http, f"{url}{FW}/HGX_FW_GPU_1"))["Version"] == "97.00.6C.00.03"
    async with http.post(f"{url}{target}/Actions/SoftwareInventory.Activate", json={}) as r:
        assert r.status == 400  # nothing staged any more
    actions = [e["action"] for e in sim.bmc(NODE).ledger]
    assert actions == ["update-multipart", "UpdateService.Activate", "SoftwareInventory.Activate"]


async def test_simple_update_fetches_from_loopback(
    sim: Simulator, http: aiohttp.ClientSession
) -> None:
    image = package_for(GB200_GPU, NEW_GPU_VERSION)

    async def serve_image(_: web.Request) -> web.Response:
        return web.Response(body=image)

    app = web.Application()
    app.router.add_get("/gpu.fwpkg", serve_image)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        port = runner.addresses[0][1]
        url = sim.bmc_url(NODE)
        action = f"{url}/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate"
        body = {"ImageURI": f"http://127.0.0.1:{port}/gpu.fwpkg"}
        async with http.post(action, json=body) as r:
            assert r.status == 202, await r.text()
            await wait_task(http, f"{url}{r.headers['Location']}")
        async with http.post(action, json={"ImageURI": "http://192.0.2.1/x"}) as r:
            assert r.status == 400
    finally:
        await runner.cleanup()
    assert (await _versions(http, url))["HGX_FW_GPU_0"] == NEW_GPU_VERSION


async def test_on_reset_apply_time_activates_at_reset(
    sim: Simulator, http: aiohttp.ClientSession
) -> None:
    url = sim.bmc_url(NODE)
    params = '{"@Redfish.OperationApplyTime": "OnReset"}'
    form = _form(package_for(GB200_GPU, NEW_GPU_VERSION), params)
    async with http.post(f"{url}{PUSH}", data=form) as r:
        assert r.status == 202
        await wait_task(http, f"{url}{r.headers['Location']}")
    assert (await _versions(http, url))["HGX_FW_GPU_0"] == "97.00.6C.00.03"
    reset = f"{url}/redfish/v1/Systems/System_0/Actions/ComputerSystem.Reset"
    async with http.post(reset, json={"ResetType": "ForceRestart"}) as r:
        assert r.status == 204
    assert (await _versions(http, url))["HGX_FW_GPU_0"] == NEW_GPU_VERSION
    ledger = sim.bmc(NODE).ledger
    assert [e["action"] for e in ledger] == ["update-multipart", "ComputerSystem.Reset"]
    assert len(ledger[1]["activated"]) == 4


async def test_fleet_json_lists_every_node(sim: Simulator, http: aiohttp.ClientSession) -> None:
    fleet = await get_json_list(http, f"{sim.base_url}/fleet.json")
    assert [n["id"] for n in fleet] == ["node-00000", "node-00001"]
    assert fleet[1]["bmc_url"] == sim.bmc_url(NODE)
    root = await get_json(http, f"{sim.bmc_url(NODE)}/redfish/v1/")
    assert root["ProtocolFeaturesSupported"]["ExpandQuery"]["Levels"] is True
    assert root["Name"].endswith(f"({NODE})")


async def test_accounts_and_privileges(sim: Simulator, http: aiohttp.ClientSession) -> None:
    url = sim.bmc_url(NODE)
    accounts = f"{url}/redfish/v1/AccountService/Accounts"
    body = {"UserName": "viewer", "Password": "viewer-pass-1", "RoleId": "ReadOnly"}
    async with http.post(accounts, json=body) as r:
        assert r.status == 201
        location = r.headers["Location"]
    account = await get_json(http, f"{url}{location}")
    assert account["Password"] is None and account["RoleId"] == "ReadOnly"
    async with http.post(accounts, json=body) as r:
        assert r.status == 409
    viewer = {"Authorization": "Basic " + base64.b64encode(b"viewer:viewer-pass-1").decode()}
    async with aiohttp.ClientSession(headers=viewer) as as_viewer:
        async with as_viewer.get(f"{url}/redfish/v1/UpdateService") as r:
            assert r.status == 200
        async with as_viewer.post(f"{url}{PUSH}", data=_form(b"x")) as r:
            assert r.status == 403
            assert (await r.json())["error"]["code"] == "Base.1.19.0.InsufficientPrivilege"
    async with http.delete(f"{url}{location}") as r:
        assert r.status == 204
    assert [e["action"] for e in sim.bmc(NODE).ledger] == ["Accounts", "Accounts", "delete"]


async def test_deleting_the_task_monitor_cancels_the_update(http: aiohttp.ClientSession) -> None:
    # Real-time scale: a GPU stage takes 8 s here, so the task is still running when deleted.
    async with Simulator(
        SimOptions(1, "gb200", time_scale=1.0, host_base="127.43.0.1", port=0)
    ) as slow:
        url = slow.bmc_url("node-00000")
        async with http.post(
            f"{url}{PUSH}", data=_form(package_for(GB200_GPU, NEW_GPU_VERSION))
        ) as r:
            assert r.status == 202
            monitor = f"{url}{r.headers['Location']}"
        async with http.get(monitor) as r:
            assert r.status == 202
            assert r.headers["Retry-After"] == "1"
        async with http.delete(monitor) as r:
            assert r.status == 200
        task = await wait_task(http, monitor)
        assert task["TaskState"] == "Cancelled"
        assert (await _versions(http, url))["HGX_FW_GPU_0"] == "97.00.6C.00.03"


async def test_latency_is_added_to_each_request(http: aiohttp.ClientSession) -> None:
    async with Simulator(
        SimOptions(1, "hgx-h100", latency_ms=80, host_base="127.44.0.1", port=0)
    ) as laggy:
        loop = asyncio.get_running_loop()
        started = loop.time()
        body = await get_json(http, f"{laggy.bmc_url('node-00000')}{FW}")
        assert loop.time() - started >= 0.08
        assert body["Members@odata.count"] == 60


async def test_without_multipart_push_only_simple_update_is_offered(
    http: aiohttp.ClientSession,
) -> None:
    options = SimOptions(1, "gb200", host_base="127.45.0.1", port=0, multipart_push=False)
    async with Simulator(options) as old:
        url = old.bmc_url("node-00000")
        service = await get_json(http, f"{url}/redfish/v1/UpdateService")
        assert "MultipartHttpPushUri" not in service
        assert "#UpdateService.SimpleUpdate" in service["Actions"]
        async with http.post(
            f"{url}{PUSH}", data=_form(package_for(GB200_GPU, NEW_GPU_VERSION))
        ) as r:
            assert r.status == 404
