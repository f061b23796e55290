"""Drift scenarios against the in-process fleet (BMCs + agents), observed the way the inventory
service observes them: Redfish FirmwareInventory GETs, the agents' InventoryObserved reports
(through a real nats-server), and failing Redfish requests."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import aiohttp
import nats
import pytest
from nats.js.api import ConsumerConfig, DeliverPolicy

from lockstep_cli.polling import until
from lockstep_common.events import REGISTRY
from lockstep_common.events.v1 import InventoryObserved
from lockstep_common.natsconn import NatsAccess
from lockstep_common.subjects import Namespace
from lockstep_common.vocabulary import Component
from lockstep_sim.agents.commands import reader
from lockstep_sim.agents.reports import inventory_event
from lockstep_sim.inventory import FIRMWARE
from lockstep_sim.options import DEFAULT_PASSWORD, DEFAULT_USERNAME, SimOptions
from lockstep_sim.runtime import FleetRuntime
from lockstep_sim.scenarios import Drift, DriftKind, default_mix
from tests.conftest import Servers

pytestmark = pytest.mark.integration
AUTH = {
    "Authorization": "Basic "
    + base64.b64encode(f"{DEFAULT_USERNAME}:{DEFAULT_PASSWORD}".encode()).decode()
}
NODES = 6
SEED = 3


@pytest.fixture
async def runtime() -> AsyncIterator[FleetRuntime]:
    async with FleetRuntime(
        SimOptions(NODES, "gb200", time_scale=0.002, host_base="127.46.0.1", port=0),
        scheduler_port=0,
    ) as rt:
        yield rt


async def call(url: str, method: str = "GET", body: Any = None) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession(headers=AUTH) as http,
        http.request(method, url, json=body) as reply,
    ):
        return reply.status, await reply.json()


async def firmware(rt: FleetRuntime, node: str) -> dict[str, str]:
    """Member id -> Version, as a sweep with ``$expand`` reads it."""
    status, doc = await call(f"{rt.bmc_url(node)}{FIRMWARE}?$expand=.")
    assert status == 200, doc
    return {m["Id"]: m["Version"] for m in doc["Members"]}


async def snapshot(rt: FleetRuntime) -> dict[str, Any]:
    """Everything the inventory can observe: firmware per node and each agent's report."""
    out: dict[str, Any] = {}
    now = datetime.now(UTC)
    for node in rt.fleet:
        report = inventory_event(node.id, node.site, rt.software[node.id].state, 1, now)
        out[node.id] = (
            await firmware(rt, node.id),
            report.components,
            report.firmware_dirs,
            report.loaded_module_version,
            rt.software[node.id].phase,
        )
    return out


async def test_each_drift_is_observable_and_undo_restores_the_fleet(
    runtime: FleetRuntime,
) -> None:
    before = await snapshot(runtime)
    planned = [d.to_dict() for d in default_mix(runtime.fleet, SEED)]  # what the demo prints
    control = f"{runtime.simulator.base_url}/scenario"
    status, body = await call(control, "POST", {"mix": "default", "seed": SEED})
    assert status == 200, body
    assert body["applied"] == planned
    drift = {d["kind"]: d for d in body["applied"]}

    revert = drift["silent_revert"]
    versions = await firmware(runtime, revert["node"])
    assert versions[revert["member"]] == revert["version"] == "GB200Nvl-24.09-4"
    _, tasks = await call(f"{runtime.bmc_url(revert['node'])}/redfish/v1/TaskService/Tasks")
    assert tasks["Members"] == []  # no update task explains the change

    rma = drift["rma_replacement"]
    versions = await firmware(runtime, rma["node"])
    gpus = {m: v for m, v in versions.items() if m.startswith("HGX_FW_GPU_")}
    assert gpus.pop(rma["member"]) == rma["version"] == "97.00.52.00.01"
    assert set(gpus.values()) == {"97.00.6C.00.03"}  # the node's GPU members disagree

    now = datetime.now(UTC)
    gsp = drift["gsp_mismatch"]
    report = inventory_event(gsp["node"], "s", runtime.software[gsp["node"]].state, 2, now)
    assert report.loaded_module_version == report.components[Component.DRIVER] == "580.95.05"
    assert report.components[Component.GPU_GSP] == "580.65.06"
    assert report.firmware_dirs == ("580.65.06",)
    agent = reader(runtime.software[gsp["node"]])()  # what its agent answers to read-state
    assert agent.phase == "gsp_mismatch" and not runtime.software[gsp["node"]].state.gsp_aligned()

    cuda = drift["cuda_incompatible"]
    report = inventory_event(cuda["node"], "s", runtime.software[cuda["node"]].state, 2, now)
    assert report.components[Component.DRIVER] == "570.172.08"
    assert report.components[Component.CUDA] == "13.0"

    dark = drift["unreachable_bmc"]["node"]
    with pytest.raises(aiohttp.ClientConnectionError):
        await call(f"{runtime.bmc_url(dark)}/redfish/v1/Systems")
    assert (await firmware(runtime, revert["node"]))[revert["member"]] == revert["version"]

    status, body = await call(control, "GET")
    assert status == 200 and [d["kind"] for d in body["active"]] == list(drift)
    status, body = await call(control, "DELETE")
    assert status == 200 and body["refused"] == []
    assert all(u["restored"] for u in body["undone"]) and len(body["undone"]) == 5
    assert await snapshot(runtime) == before


@pytest.mark.parametrize(
    ("body", "field", "status"),
    [
        ({"drifts": [{"kind": "silent_revert", "node": "node-99999"}]}, "drifts[0].node", 400),
        (
            {"drifts": [{"kind": "rma_replacement", "node": "node-00001", "member": "UEFI"}]},
            "drifts[0].member",
            400,
        ),
        (
            {
                "drifts": [
                    {"kind": "unreachable_bmc", "node": "node-00002"},
                    {"kind": "gsp_mismatch", "node": "node-00003", "driver": "999.1"},
                ]
            },
            "drifts[1].driver",
            400,
        ),
        (
            {"drifts": [{"kind": "cuda_incompatible", "node": "node-00004", "cuda": "12.2"}]},
            "drifts[0].cuda",
            400,
        ),
        (
            {"drifts": [{"kind": "silent_revert", "node": "node-00005", "bogus": 1}]},
            "drifts[0].bogus",
            400,
        ),
        ({"mix": "default", "seed": True}, "seed", 400),
        ("not an object", "body", 400),
    ],
)
async def test_bad_input_is_refused_naming_the_field_and_changes_nothing(
    runtime: FleetRuntime, body: Any, field: str, status: int
) -> None:
    before = await snapshot(runtime)
    got, reply = await call(f"{runtime.simulator.base_url}/scenario", "POST", body)
    assert (got, reply["field"]) == (status, field), reply
    assert reply["error"].startswith(f"{field}: ")
    assert await snapshot(runtime) == before
    assert runtime.drifts.plan() == [] and runtime.simulator.faults.plan.faults == ()


async def test_conflicts_answer_409_and_undo_of_nothing_is_refused(runtime: FleetRuntime) -> None:
    control = f"{runtime.simulator.base_url}/scenario"
    one = {"drifts": [{"kind": "silent_revert", "node": "node-00001"}]}
    assert (await call(control, "POST", one))[0] == 200
    status, reply = await call(control, "POST", one)
    assert status == 409 and reply["field"] == "drifts[0].node"
    assert "already has drift silent_revert" in reply["error"]
    assert (await call(f"{control}?node=node-00001", "DELETE"))[0] == 200
    status, reply = await call(f"{control}?node=node-00001", "DELETE")
    assert status == 400 and reply["field"] == "node"
    async with aiohttp.ClientSession() as http, http.post(control, data=b"{nope") as r:
        assert r.status == 400 and (await r.json())["field"] == "body"


async def test_a_hung_bmc_answers_once_the_drift_is_undone(runtime: FleetRuntime) -> None:
    node = "node-00002"
    runtime.drifts.apply([Drift(DriftKind.UNREACHABLE_BMC, node, mode="hang")])
    bmc = runtime.simulator.bmc(node)
    pending = asyncio.ensure_future(call(f"{runtime.bmc_url(node)}/redfish/v1/Systems"))

    async def hung() -> bool:
        return any(e.get("fault") == "hang" for e in bmc.ledger)

    await until(hung, timeout_s=10, what="the request to hang")
    assert not pending.done()
    status, _ = await call(f"{runtime.simulator.base_url}/scenario?node={node}", "DELETE")
    assert status == 200
    assert (await asyncio.wait_for(pending, 10))[0] == 200


async def _latest_reports(nats_url: str, ns: Namespace) -> dict[str, InventoryObserved]:
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        stream = ns.stream("TELEMETRY")
        total = (await js.stream_info(stream)).state.messages
        sub = await js.pull_subscribe(
            ns.wire("telemetry.observed.inventory.>"),
            stream=stream,
            config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL),
        )
        latest: dict[str, InventoryObserved] = {}
        seen = 0
        while seen < total:
            try:
                batch = await sub.fetch(500, timeout=1)
            except nats.errors.TimeoutError:
                break
            seen += len(batch)
            for msg in batch:
                data = REGISTRY.decode(msg.data, max_bytes=1 << 20).data
                assert isinstance(data, InventoryObserved)
                if data.node_id not in latest or data.sequence > latest[data.node_id].sequence:
                    latest[data.node_id] = data
        await sub.unsubscribe()
        return latest
    finally:
        await nc.close()


async def test_the_next_agent_report_carries_the_in_band_drifts(
    servers: Servers, namespace: str
) -> None:
    runtime = FleetRuntime(
        SimOptions(NODES, "gb200", host_base="127.46.1.1", port=0),
        scheduler_port=0,
        nats=NatsAccess.from_url(servers.nats_url),
        namespace=namespace,
        create_streams=True,
        cadence_s=3600.0,
    )
    ns = Namespace(namespace)
    async with runtime:

        async def first_cycle() -> bool:
            return all(a.stats.cycles >= 1 for a in runtime.agents)

        await until(first_cycle, timeout_s=10, what="the first telemetry cycle")
        gsp, cuda = "node-00001", "node-00004"
        status, body = await call(
            f"{runtime.simulator.base_url}/scenario",
            "POST",
            {
                "drifts": [
                    {"kind": "gsp_mismatch", "node": gsp},
                    {"kind": "cuda_incompatible", "node": cuda},
                ]
            },
        )
        assert status == 200, body
        for agents in runtime.agents:
            assert await agents.publish_cycle()
        latest = await _latest_reports(servers.nats_url, ns)
        assert latest[gsp].sequence == latest[cuda].sequence == 2
        assert latest[gsp].loaded_module_version == "580.95.05"
        assert latest[gsp].firmware_dirs == ("580.65.06",)
        assert latest[gsp].components[Component.GPU_GSP] == "580.65.06"
        assert latest[cuda].components[Component.DRIVER] == "570.172.08"
        assert latest[cuda].components[Component.CUDA] == "13.0"
        assert latest["node-00000"].components[Component.DRIVER] == "580.65.06"
