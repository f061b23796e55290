"""``sim run --advertise HOST``: the simulator as a container on a compose network
(compose.sim.yaml), where the other containers cannot reach its loopback addresses: every BMC
on its own port of every interface, the fleet list naming HOST, the scheduler on every
interface too; without it, nothing listens beyond the loopback."""

from __future__ import annotations

import base64
from typing import Any

import aiohttp
import pytest

from lockstep_sim.listening import ALL_INTERFACES
from lockstep_sim.options import DEFAULT_PASSWORD, DEFAULT_USERNAME, SimOptions
from lockstep_sim.runtime import FleetRuntime

pytestmark = pytest.mark.integration

AUTH = {
    "Authorization": "Basic "
    + base64.b64encode(f"{DEFAULT_USERNAME}:{DEFAULT_PASSWORD}".encode()).decode()
}


async def _json(http: aiohttp.ClientSession, url: str) -> Any:
    async with http.get(url) as reply:
        assert reply.status == 200, await reply.text()
        return await reply.json()


def _listening(runtime: FleetRuntime) -> set[str]:
    runners = [runtime.simulator._runner, runtime._scheduler_runner]
    return {str(address[0]) for r in runners if r is not None for address in r.addresses}


async def test_advertised_bmcs_each_answer_on_their_own_port_named_in_the_fleet_list() -> None:
    options = SimOptions(3, port=0, host_base="127.63.0.1", advertise="localhost")
    async with (
        FleetRuntime(options, scheduler_port=0) as runtime,
        aiohttp.ClientSession(headers=AUTH) as http,
    ):
        assert _listening(runtime) == {ALL_INTERFACES}
        first, last = sorted(runtime.simulator.ports.values())[:: len(runtime.fleet) - 1]
        assert (
            runtime.simulator.listening == f"on ports {first}-{last} of localhost (every interface)"
        )
        fleet = await _json(http, runtime.fleet_url)
        urls = [n["bmc_url"] for n in fleet]
        ports = {runtime.simulator.ports[n.id] for n in runtime.fleet}
        assert urls == [f"http://localhost:{runtime.simulator.ports[n['id']]}" for n in fleet]
        assert len(ports) == 3  # one port each: the BMC is told apart by it
        for node in fleet:
            system = await _json(http, f"{node['bmc_url']}/redfish/v1/Systems/System_0")
            assert system["Name"] == node["id"]
        assert runtime.scheduler_url.startswith("http://localhost:")
        scheduled = await _json(http, f"{runtime.scheduler_url}/scheduler/nodes")
        assert {n["id"] for n in scheduled["nodes"]} == {n["id"] for n in fleet}


async def test_without_advertise_nothing_listens_beyond_the_loopback() -> None:
    options = SimOptions(2, port=0, host_base="127.64.0.1")
    async with FleetRuntime(options, scheduler_port=0) as runtime:
        assert _listening(runtime) == {"127.64.0.1", "127.64.0.2", "127.0.0.1"}
        assert runtime.simulator.ports == {}
        assert runtime.simulator.listening == f"on port {runtime.simulator.port} from 127.64.0.1"
        assert runtime.fleet_url.startswith("http://127.64.0.1:")
