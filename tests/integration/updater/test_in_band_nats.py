"""The updater's in-band steps over NATS (``agent_channel = nats``): each call one
``node.command`` to the node's own agent, on a real nats-server with the generated permissions
and enrolled agents' nkeys; each simulated node answers through the real agent's command
executor (its journal, its fence, its digest check) with a simulated host
(``lockstep_sim.agents.commands``). No HTTP agent channel is involved: its ledger stays empty.

What a user relies on: a rollout's driver unit is installed, booted and verified; bytes that
are not the attested package are refused and nothing is installed; a call re-sent with the
same order (a step retried after a crash) is answered from the agent's journal and runs once; a
lapsed fencing token is refused; the fallback branch, which no bundle attests, is never sent.
Only the updater may publish a command: ``tests/integration/agent/test_command_channel.py``
(``test_only_the_updater_may_send_a_command``) proves it on the same permissions.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from nats.aio.client import Client as NatsClient

from lockstep_agent.command_channel import CommandChannel
from lockstep_cli.catalog import bus_permissions
from lockstep_common import natsconn
from lockstep_common.envelope import source_of
from lockstep_common.identities import agent_identity
from lockstep_common.provenance import UPDATER
from lockstep_common.subjects import Namespace
from lockstep_common.vocabulary import Component
from lockstep_devstack import agents
from lockstep_devstack.nats import NatsServer
from lockstep_devstack.process import free_port
from lockstep_sim.agents.commands import SimHost, package_bytes, sim_executor
from lockstep_updater.adapters.agent_commands import NatsAgentCommands
from lockstep_updater.adapters.node_agent_nats import NatsNodeAgent
from lockstep_updater.domain.steps import NodeStep
from lockstep_updater.ports import AgentOrder, AgentRefused
from tests.integration.updater.conftest import STACK, World
from tests.integration.updater.test_gsp_runbook_sim import (
    NEW,
    OLD,
    _release,
    agent_ledger,
    driver_in_bundle,
)

pytestmark = pytest.mark.integration
NS = Namespace("inbandnats")


@dataclass
class Bus:
    server: NatsServer
    agent: NatsNodeAgent
    hosts: dict[str, SimHost]
    conns: list[NatsClient] = field(default_factory=list)


@pytest.fixture
async def bus(world: World) -> AsyncIterator[Bus]:
    base = Path(tempfile.mkdtemp(prefix="lockstep-inband-nats-"))
    sites = {node.id: node.site for node in world.rt.fleet}
    agents.enroll(base, sites)
    server = NatsServer(
        base / "nats",
        port=free_port(),
        sync_always=False,
        access=bus_permissions(NS),
        secrets_dir=base,
    )
    server.start(timeout_s=30)
    conns: list[NatsClient] = []
    hosts: dict[str, SimHost] = {}
    try:
        for node, site in sites.items():
            executor, hosts[node] = sim_executor(
                world.rt.software[node], base / node / "commands.sqlite"
            )
            nc = await natsconn.connect(server.client(agent_identity(node)), name=node)
            conns.append(nc)
            await CommandChannel(executor, NS, site, node).subscribe(nc)
        updater = await natsconn.connect(server.client(UPDATER), name="test-updater")
        conns.append(updater)
        commands = NatsAgentCommands(updater, NS, source_of(UPDATER), timeout_s=30)
        yield Bus(server, NatsNodeAgent(commands), hosts, conns)
    finally:
        for nc in conns:
            await nc.close()
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


async def _attest_driver(w: World, package: bytes) -> None:
    async with w.store.transaction() as tx:
        await tx.record_bundle(STACK, str(w.bundle), (driver_in_bundle(w, package),))


def _order(w: World, node: str, token: int = 7, digest: str | None = None) -> AgentOrder:
    site = w.rt.fleet[0].site
    sha = digest or hashlib.sha256(package_bytes(NEW)).hexdigest()
    return AgentOrder(site, node, "42", token, "target", sha)


async def test_a_rollouts_driver_unit_runs_through_the_agents_executor(
    world: World, bus: Bus
) -> None:
    w, node = world, world.rt.fleet[0].id
    await _attest_driver(w, package_bytes(NEW))
    await _release(w, node, (Component.DRIVER,))
    ex = w.executor()
    ex.inband.agent = bus.agent
    await w.settle(ex)
    item = w.store.item(node)
    assert item.state is NodeStep.DONE, item.reason
    software = w.rt.software[node].state
    assert (software.loaded_module, software.gsp_firmware) == (NEW, NEW)
    ran = [argv[:2] for argv in bus.hosts[node].ran]
    assert ran == [("apt-get", "download"), ("apt-get", "install"), ("systemctl", "reboot")]
    assert bus.hosts[node].ran[0][2] == f"nvidia-driver={NEW}"
    assert await agent_ledger(w, node) == []  # the HTTP channel was never used


async def test_bytes_that_are_not_the_attested_package_are_refused_and_nothing_installed(
    world: World, bus: Bus
) -> None:
    w, node = world, world.rt.fleet[1].id
    await _attest_driver(w, b"the package the bundle attests " + NEW.encode())
    await _release(w, node, (Component.DRIVER,))
    ex = w.executor()
    ex.inband.agent = bus.agent
    await w.settle(ex)
    item = w.store.item(node)
    assert item.state is not NodeStep.DONE
    assert "not the attested" in item.reason and "not installed" in item.reason
    assert w.rt.software[node].state.driver.version == OLD
    assert [argv[:2] for argv in bus.hosts[node].ran] == [("apt-get", "download")]


async def test_a_call_resent_with_the_same_order_runs_once(world: World, bus: Bus) -> None:
    """A step retried after a crash sends the call it had sent: the same work item, attempt
    and call make the same command id, and the agent answers it from its journal."""
    node = world.rt.fleet[2].id
    order = _order(world, node)
    first = await bus.agent.install_driver(order, NEW)
    again = await bus.agent.install_driver(order, NEW)
    assert first == again and first.driver == NEW
    installs = [a for a in bus.hosts[node].ran if a[:2] == ("apt-get", "install")]
    assert len(installs) == 1


async def test_a_lapsed_fencing_token_is_refused_and_nothing_runs(world: World, bus: Bus) -> None:
    w, node = world, world.rt.fleet[3].id
    await bus.agent.install_driver(_order(w, node, token=8), NEW)
    ran = list(bus.hosts[node].ran)
    with pytest.raises(AgentRefused, match="fencing token 7 of work item 42 has lapsed"):
        await bus.agent.reboot(_order(w, node, token=7))
    assert bus.hosts[node].ran == ran


async def test_the_fallback_branch_no_bundle_attests_is_never_sent(world: World, bus: Bus) -> None:
    w, node = world, world.rt.fleet[0].id
    fallback = AgentOrder(w.rt.fleet[0].site, node, "42", 7, "fallback", None)
    with pytest.raises(AgentRefused, match="no attested package"):
        await bus.agent.install_driver(fallback, OLD)
    assert bus.hosts[node].ran == []
