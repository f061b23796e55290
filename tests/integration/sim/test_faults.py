"""Every injected fault observed through real HTTP against the in-process simulator."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from lockstep_cli.polling import until
from lockstep_sim.faults import Fault, FaultPlan
from lockstep_sim.options import SimOptions
from lockstep_sim.profiles import GB200
from lockstep_sim.simulator import Simulator

from .conftest import get_json
from .pldm_fixtures import GB200_GPU, NEW_GPU_VERSION, package_for

pytestmark = pytest.mark.integration
NODE, OTHER = "node-00001", "node-00000"
FW = "/redfish/v1/UpdateService/FirmwareInventory"
PUSH = "/redfish/v1/UpdateService/update-multipart"
SYSTEMS = "/redfish/v1/Systems"
OLD_GPU = GB200_GPU.version
GPU0 = f"{FW}/HGX_FW_GPU_0"
Factory = Callable[..., Awaitable[Simulator]]
OFFLINE_POLL_S = 0.005  # a rebooting BMC is offline for about 0.2 s: poll often enough to see it


@pytest.fixture
async def make_sim() -> AsyncIterator[Factory]:
    """Simulators with a fault plan; ``time_scale`` seconds per BMC minute."""
    sims: list[Simulator] = []

    async def make(*faults: Fault, time_scale: float = 0.002) -> Simulator:
        sim = Simulator(
            SimOptions(
                2,
                "gb200",
                time_scale=time_scale,
                host_base=f"127.44.{len(sims)}.1",
                port=0,
                faults=FaultPlan(faults),
            )
        )
        await sim.start()
        sims.append(sim)
        return sim

    yield make
    for sim in sims:
        await sim.stop()


async def poll(http: aiohttp.ClientSession, url: str) -> tuple[int, Any]:
    """(status, body) or (0, None) when the BMC reset the connection."""
    try:
        async with http.get(url) as reply:
            return reply.status, await reply.json()
    except aiohttp.ClientConnectionError:
        return 0, None


async def push(sim: Simulator, http: aiohttp.ClientSession, image: bytes | None = None) -> str:
    form = aiohttp.FormData()
    form.add_field("UpdateParameters", "{}", content_type="application/json")
    form.add_field("UpdateFile", image or package_for(GB200_GPU, NEW_GPU_VERSION), filename="p")
    url = sim.bmc_url(NODE)
    async with http.post(f"{url}{PUSH}", data=form) as reply:
        assert reply.status == 202, await reply.text()
        return f"{url}{reply.headers['Location']}"


async def finished(http: aiohttp.ClientSession, monitor: str) -> dict[str, Any]:
    async def done() -> dict[str, Any] | None:
        status, body = await poll(http, monitor)
        return body if status == 200 else None

    result: dict[str, Any] = await until(done, what=f"task {monitor} to finish")
    return result


def faults_in(sim: Simulator, node: str = NODE) -> list[str]:
    return [e["fault"] for e in sim.bmc(node).ledger if e.get("kind") == "fault"]


async def test_http_5xx_with_retry_after_then_recovers(
    make_sim: Factory, http: aiohttp.ClientSession
) -> None:
    sim = await make_sim(Fault("http_5xx", nodes=(NODE,), status=503, retry_after=7, count=2))
    for _ in range(2):
        async with http.get(f"{sim.bmc_url(NODE)}{SYSTEMS}") as reply:
            assert reply.status == 503 and reply.headers["Retry-After"] == "7"
            body = await reply.json()
            assert body["error"]["code"] == "Base.1.19.0.ServiceTemporarilyUnavailable"
    assert (await poll(http, f"{sim.bmc_url(NODE)}{SYSTEMS}"))[0] == 200
    assert (await poll(http, f"{sim.bmc_url(OTHER)}{SYSTEMS}"))[0] == 200
    assert faults_in(sim) == ["http_5xx", "http_5xx"] and faults_in(sim, OTHER) == []
    ledger = await get_json_list(http, f"{sim.base_url}/ledger?node={NODE}")
    assert ledger[0]["kind"] == "fault" and ledger[0]["path"] == SYSTEMS


async def get_json_list(http: aiohttp.ClientSession, url: str) -> list[dict[str, Any]]:
    async with http.get(url) as reply:
        assert reply.status == 200
        body: list[dict[str, Any]] = await reply.json()
        return body


async def test_connection_reset_and_latency(make_sim: Factory, http: aiohttp.ClientSession) -> None:
    sim = await make_sim(
        Fault("connection_reset", nodes=(NODE,)),
        Fault("latency", nodes=(OTHER,), latency_ms=150, count=1),
    )
    with pytest.raises(aiohttp.ClientConnectionError):
        async with http.get(f"{sim.bmc_url(NODE)}{SYSTEMS}") as reply:
            await reply.read()
    assert faults_in(sim)[0] == "connection_reset"  # aiohttp retries an idempotent GET once
    started = time.monotonic()
    assert (await poll(http, f"{sim.bmc_url(OTHER)}{SYSTEMS}"))[0] == 200
    assert time.monotonic() - started >= 0.15
    assert faults_in(sim, OTHER) == ["latency"]
    sim.set_faults(None)
    assert (await poll(http, f"{sim.bmc_url(NODE)}{SYSTEMS}"))[0] == 200


async def test_hang_until_cleared_and_bounded(
    make_sim: Factory, http: aiohttp.ClientSession
) -> None:
    sim = await make_sim(Fault("hang", nodes=(NODE,), count=1))
    request = asyncio.create_task(poll(http, f"{sim.bmc_url(NODE)}{SYSTEMS}"))

    async def hanging() -> bool:
        return faults_in(sim) == ["hang"]

    await until(hanging, what="the request to hang")
    assert not request.done()
    async with http.delete(f"{sim.base_url}/faults") as reply:
        assert reply.status == 200 and (await reply.json())["faults"] == []
    assert (await request)[0] == 200  # answered once the fault was cleared
    sim.set_faults(FaultPlan((Fault("hang", nodes=(NODE,), max_seconds=0.1),)))
    assert await poll(http, f"{sim.bmc_url(NODE)}{SYSTEMS}") == (0, None)  # dropped at the bound


async def test_control_endpoint_replace_and_clear(
    make_sim: Factory, http: aiohttp.ClientSession
) -> None:
    sim = await make_sim()
    assert await get_json(http, f"{sim.base_url}/faults") == {"seed": 0, "faults": []}
    plan = {"seed": 4, "faults": [{"kind": "http_5xx", "nodes": [NODE], "status": 500}]}
    async with http.put(f"{sim.base_url}/faults", json=plan) as reply:
        assert reply.status == 200
    got = await get_json(http, f"{sim.base_url}/faults")
    assert got["seed"] == 4 and got["faults"][0]["status"] == 500
    async with http.get(f"{sim.bmc_url(NODE)}{SYSTEMS}") as reply:
        assert reply.status == 500 and "Retry-After" in reply.headers
    bad = {"faults": [{"kind": "http_5xx", "status": 404}]}
    async with http.put(f"{sim.base_url}/faults", json=bad) as reply:
        assert reply.status == 400
        body = await reply.json()
        assert body["field"] == "faults[0].status" and "faults[0].status" in body["error"]
    async with http.put(f"{sim.base_url}/faults", data=b"{") as reply:
        assert reply.status == 400
    assert (await get_json(http, f"{sim.base_url}/faults"))["seed"] == 4  # unchanged by a 400
    async with http.delete(f"{sim.base_url}/faults") as reply:
        assert reply.status == 200
    assert (await poll(http, f"{sim.bmc_url(NODE)}{SYSTEMS}"))[0] == 200


async def test_task_stuck_at_percent_until_cleared(
    make_sim: Factory, http: aiohttp.ClientSession
) -> None:
    sim = await make_sim(Fault("task_stuck", nodes=(NODE,), percent=99, count=1))
    monitor = await push(sim, http)

    async def stuck() -> bool:
        status, body = await poll(http, monitor)
        return status == 202 and body["PercentComplete"] == 99 and body["TaskState"] == "Running"

    await until(stuck, what="the task stuck at 99%")
    assert faults_in(sim) == ["task_stuck"]
    sim.set_faults(None)
    task = await finished(http, monitor)
    assert task["TaskState"] == "Completed"


async def test_bmc_reboot_mid_task_unreachable_then_resumes(
    make_sim: Factory, http: aiohttp.ClientSession
) -> None:
    sim = await make_sim(
        Fault("bmc_reboot_mid_task", nodes=(NODE,), duration_minutes=20, count=1),
        time_scale=0.01,
    )
    monitor = await push(sim, http)
    await until(lambda: _unreachable(http, monitor), what="the BMC offline", poll_s=OFFLINE_POLL_S)
    task = await finished(http, monitor)  # back after ~0.2 s; the task resumed
    assert task["TaskState"] == "Completed"
    assert (await get_json(http, f"{sim.bmc_url(NODE)}{GPU0}"))["Version"] == NEW_GPU_VERSION
    assert faults_in(sim) == ["bmc_reboot_mid_task"]


async def test_bmc_reboot_mid_task_can_forget_sessions_and_tasks(
    make_sim: Factory, http: aiohttp.ClientSession
) -> None:
    sim = await make_sim(
        Fault("bmc_reboot_mid_task", nodes=(NODE,), duration_minutes=20, forget_state=True),
        time_scale=0.01,
    )
    bmc = sim.bmc(NODE)
    bmc.sessions.create("admin")
    monitor = await push(sim, http)
    await until(lambda: _unreachable(http, monitor), what="the BMC offline", poll_s=OFFLINE_POLL_S)
    assert bmc.sessions.ids() == [] and bmc.tasks == {}  # lost with the reboot

    async def flashed() -> bool:
        member = await poll(http, f"{sim.bmc_url(NODE)}{GPU0}")
        return member[0] == 200 and member[1]["Version"] == NEW_GPU_VERSION

    await until(flashed, what="the flash to finish without its task")
    assert (await poll(http, monitor))[0] == 404
    await push(sim, http, package_for(GB200_GPU, "97.00.9B.00.01"))
    assert list(bmc.tasks) == ["2"]  # task ids are not reused after the reboot


async def _unreachable(http: aiohttp.ClientSession, url: str) -> bool:
    return (await poll(http, url)) == (0, None)


async def test_bmc_reboot_mid_task_can_fail_the_task(
    make_sim: Factory, http: aiohttp.ClientSession
) -> None:
    sim = await make_sim(
        Fault("bmc_reboot_mid_task", nodes=(NODE,), duration_minutes=10, resume=False)
    )
    task = await finished(http, await push(sim, http))
    assert task["TaskState"] == "Exception"
    assert task["Messages"][-1]["MessageId"] == "Update.1.3.0.ApplyFailed"
    assert (await get_json(http, f"{sim.bmc_url(NODE)}{GPU0}"))["Version"] == OLD_GPU


async def test_bmc_firmware_self_reset_refuses_connections(
    make_sim: Factory, http: aiohttp.ClientSession
) -> None:
    sim = await make_sim(time_scale=0.05)  # BMC activation: 4 min -> 0.2 s offline
    bmc_class = next(c for c in GB200 if c.kind == "bmc")
    monitor = await push(sim, http, package_for(bmc_class, "GB200Nvl-25.01-1"))
    await until(lambda: _unreachable(http, monitor), what="the BMC offline", poll_s=OFFLINE_POLL_S)
    assert (await poll(http, f"{sim.bmc_url(OTHER)}{SYSTEMS}"))[0] == 200  # only that BMC
    task = await finished(http, monitor)
    assert task["TaskState"] == "Completed"
    member = await get_json(http, f"{sim.bmc_url(NODE)}{FW}/FW_BMC_0")
    assert member["Version"] == "GB200Nvl-25.01-1"


async def test_failed_flash_leaves_the_version(
    make_sim: Factory, http: aiohttp.ClientSession
) -> None:
    sim = await make_sim(Fault("failed_flash", nodes=(NODE,), components=("HGX_FW_GPU_0",)))
    task = await finished(http, await push(sim, http))
    assert task["TaskState"] == "Exception" and task["TaskStatus"] == "Critical"
    assert task["Messages"][-1]["MessageId"] == "Update.1.3.0.ApplyFailed"
    member = await get_json(http, f"{sim.bmc_url(NODE)}{GPU0}")
    assert member["Version"] == OLD_GPU and member["Staged"] is False
    assert faults_in(sim) == ["failed_flash"]


async def test_silent_revert_visible_on_reread(
    make_sim: Factory, http: aiohttp.ClientSession
) -> None:
    sim = await make_sim(
        Fault("silent_revert", nodes=(NODE,), components=("HGX_FW_GPU_0",), delay_minutes=250)
    )
    task = await finished(http, await push(sim, http))
    assert task["TaskState"] == "Completed"  # the activation reported success
    url = f"{sim.bmc_url(NODE)}{GPU0}"
    assert (await get_json(http, url))["Version"] == NEW_GPU_VERSION

    async def reverted() -> bool:
        return bool((await get_json(http, url))["Version"] == OLD_GPU)

    await until(reverted, what="the GPU firmware reverted")
    assert faults_in(sim) == ["silent_revert", "silent_revert_applied"]
    assert (await get_json(http, f"{sim.bmc_url(NODE)}{FW}/HGX_FW_GPU_1"))["Version"] != OLD_GPU


async def test_bricked_wrong_version_and_degraded_health(
    make_sim: Factory, http: aiohttp.ClientSession
) -> None:
    sim = await make_sim(
        Fault("bricked", nodes=(NODE,), components=("HGX_FW_GPU_0",)),
        Fault("wrong_version", nodes=(NODE,), components=("HGX_FW_GPU_1",), version="96.0"),
        Fault("degrade_health", nodes=(NODE,), components=("gpu",), count=1),
    )
    assert sim.bmc(NODE).node.degraded_after_activation is False
    task = await finished(http, await push(sim, http))
    assert task["TaskState"] == "Completed"
    bricked = await get_json(http, f"{sim.bmc_url(NODE)}{GPU0}")
    assert bricked["Status"] == {"State": "UnavailableOffline", "Health": "Critical"}
    assert "Version" not in bricked
    wrong = await get_json(http, f"{sim.bmc_url(NODE)}{FW}/HGX_FW_GPU_1")
    assert wrong["Version"] == "96.0"
    assert sim.bmc(NODE).node.degraded_after_activation is True
    assert sim.bmc(OTHER).node.degraded_after_activation is False
    assert sorted(faults_in(sim)) == ["bricked", "degrade_health", "wrong_version"]


async def test_back_to_back_updates_serialize(
    make_sim: Factory, http: aiohttp.ClientSession
) -> None:
    sim = await make_sim(time_scale=0.005)
    first = await push(sim, http)
    second = await push(sim, http, package_for(GB200_GPU, "97.00.9B.00.01"))
    status, body = await poll(http, second)
    assert status == 202 and body["TaskState"] == "Pending"  # waits for the first flash
    assert (await finished(http, first))["TaskState"] == "Completed"
    assert (await finished(http, second))["TaskState"] == "Completed"
    assert (await get_json(http, f"{sim.bmc_url(NODE)}{GPU0}"))["Version"] == "97.00.9B.00.01"


async def test_manager_reset_takes_the_bmc_offline(
    make_sim: Factory, http: aiohttp.ClientSession
) -> None:
    sim = await make_sim(time_scale=0.1)  # 2 min reboot -> 0.2 s offline
    url = sim.bmc_url(NODE)
    reset = "/redfish/v1/Managers/BMC_0/Actions/Manager.Reset"
    async with http.post(f"{url}{reset}", json={"ResetType": "GracefulRestart"}) as reply:
        assert reply.status == 204
    assert await _unreachable(http, f"{url}{SYSTEMS}")
    await until(lambda: _reachable(http, f"{url}{SYSTEMS}"), what="the BMC back")


async def _reachable(http: aiohttp.ClientSession, url: str) -> bool:
    return (await poll(http, url))[0] == 200
