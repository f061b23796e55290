"""FleetRuntime against a real nats-server: fleet list, a BMC GET, a scheduler drain/resume,
one telemetry cycle from every node, and a clean stop."""

from __future__ import annotations

import base64
from typing import Any

import aiohttp
import nats
import pytest

from lockstep_cli.polling import until
from lockstep_common.events import REGISTRY
from lockstep_common.events.v1 import HealthObserved, InventoryObserved
from lockstep_common.natsconn import NatsAccess
from lockstep_common.subjects import Namespace
from lockstep_sim.inventory import FIRMWARE
from lockstep_sim.options import DEFAULT_PASSWORD, DEFAULT_USERNAME, SimOptions
from lockstep_sim.runtime import FleetRuntime
from tests.conftest import Servers
from tests.support import stored_telemetry

pytestmark = pytest.mark.integration
NODES = 5
AUTH = {
    "Authorization": "Basic "
    + base64.b64encode(f"{DEFAULT_USERNAME}:{DEFAULT_PASSWORD}".encode()).decode()
}


async def _json(http: aiohttp.ClientSession, method: str, url: str, **kw: Any) -> Any:
    async with http.request(method, url, **kw) as reply:
        assert reply.status == 200, await reply.text()
        return await reply.json()


async def _telemetry(nats_url: str, ns: Namespace) -> list[tuple[str, bytes]]:
    nc = await nats.connect(nats_url)
    try:
        return await stored_telemetry(nc.jetstream(), ns)
    finally:
        await nc.close()


async def test_fleet_runtime_end_to_end(servers: Servers, namespace: str) -> None:
    runtime = FleetRuntime(
        SimOptions(NODES, seed=3, host_base="127.43.0.1", port=0),
        scheduler_port=0,
        nats=NatsAccess.from_url(servers.nats_url),
        namespace=namespace,
        create_streams=True,
        cadence_s=3600.0,
    )
    ns = Namespace(namespace)
    async with runtime, aiohttp.ClientSession(headers=AUTH) as http:
        fleet = await _json(http, "GET", runtime.fleet_url)
        assert [n["id"] for n in fleet] == [n.id for n in runtime.fleet]
        node = fleet[-1]
        assert node["bmc_url"] == runtime.bmc_url(node["id"])

        member = next(iter(runtime.fleet[-1].components))
        doc = await _json(http, "GET", f"{node['bmc_url']}{FIRMWARE}/{member}")
        assert doc["Id"] == member

        sched_nodes = (await _json(http, "GET", f"{runtime.scheduler_url}/scheduler/nodes"))[
            "nodes"
        ]
        assert {(n["id"], n["pool"]) for n in sched_nodes} == {(n["id"], n["pool"]) for n in fleet}
        url = f"{runtime.scheduler_url}/scheduler/nodes/{node['id']}"
        drained = await _json(http, "POST", f"{url}/drain", json={"reason": "fw", "by": "t"})
        assert drained["state"] == "drained"
        # Every BMC ledger entry carries the node's scheduler state at the instant it was taken.
        login = {"UserName": DEFAULT_USERNAME, "Password": DEFAULT_PASSWORD}
        async with http.post(f"{node['bmc_url']}/redfish/v1/SessionService/Sessions", json=login):
            pass
        resumed = await _json(http, "POST", f"{url}/resume", json={"by": "t"})
        assert resumed["state"] == "idle"
        async with http.post(f"{node['bmc_url']}/redfish/v1/SessionService/Sessions", json=login):
            pass
        logins = runtime.simulator.bmc(node["id"]).ledger[-2:]
        assert [(e["scheduler_state"], e["drained_by"]) for e in logins] == [
            ("drained", "t"),
            ("idle", None),
        ]

        expected = {n.id: n.site for n in runtime.fleet}

        async def one_cycle() -> bool:
            return all(a.stats.cycles >= 1 for a in runtime.agents)

        await until(one_cycle, timeout_s=10, what="one telemetry cycle")
        seen: dict[tuple[str, type], str] = {}
        for subject, body in await _telemetry(servers.nats_url, ns):
            data = REGISTRY.decode(body, max_bytes=1 << 20).data
            assert isinstance(data, InventoryObserved | HealthObserved)
            assert subject.startswith(f"{namespace}.telemetry.observed.")
            seen[(data.node_id, type(data))] = data.site
        for node_id, site in expected.items():
            assert seen[(node_id, InventoryObserved)] == site
            assert seen[(node_id, HealthObserved)] == site
        assert len(runtime.telemetry_subjects()) == 2 * len(set(expected.values()))

    assert runtime.agents == []
    async with aiohttp.ClientSession() as http:
        for url in (runtime.fleet_url, f"{runtime.scheduler_url}/scheduler/nodes"):
            with pytest.raises(aiohttp.ClientConnectionError):
                async with http.get(url):
                    pass


async def test_without_nats_there_are_no_agents() -> None:
    async with FleetRuntime(
        SimOptions(2, host_base="127.43.1.1", port=0), scheduler_port=0
    ) as runtime:
        assert runtime.agents == []
        assert runtime.telemetry_subjects() == []
        async with aiohttp.ClientSession() as http:
            pools = await _json(http, "GET", f"{runtime.scheduler_url}/scheduler/pools")
        assert sorted(i for p in pools["pools"] for i in p["nodes"]) == [
            n.id for n in runtime.fleet
        ]
