"""The updater's in-band steps over NATS (``agent_channel = nats``): each call one
``node.command`` to the node's own agent, on a real nats-server with the generated permissions
and enrolled agents' nkeys; each simulated node answers through the real agent's command
executor (its journal, its fence, its digest check) with a simulated host
(``lockstep_sim.agents.commands``), the one command path the simulator has.

What a user relies on: a rollout's driver unit is installed, booted and verified; bytes that
are not the attested package are refused and nothing is installed; a call re-sent with the
same order (a step retried after a crash) is answered from the agent's journal and runs once; a
lapsed fencing token is refused; the fallback branch, which no bundle attests, is never sent.
Only the updater may publish a command: ``tests/integration/agent/test_command_channel.py``
(``test_only_the_updater_may_send_a_command``) proves it on the same permissions.
"""

from __future__ import annotations

import hashlib

import pytest

from lockstep_common.vocabulary import Component
from lockstep_sim.agents.commands import SimHost, package_bytes
from lockstep_updater.domain.steps import NodeStep
from lockstep_updater.ports import AgentOrder, AgentRefused
from tests.integration.updater.conftest import STACK, AgentBus, World
from tests.integration.updater.test_gsp_runbook_sim import (
    NEW,
    OLD,
    _release,
    agent_ledger,
    driver_in_bundle,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def bus(agent_bus: AgentBus) -> AgentBus:
    return agent_bus


def host(w: World, node: str) -> SimHost:
    return w.rt.command_hosts[node]


async def _attest_driver(w: World, package: bytes) -> None:
    async with w.store.transaction() as tx:
        await tx.record_bundle(STACK, str(w.bundle), (driver_in_bundle(w, package),))


def _order(w: World, node: str, token: int = 7, digest: str | None = None) -> AgentOrder:
    site = w.rt.fleet[0].site
    sha = digest or hashlib.sha256(package_bytes(NEW)).hexdigest()
    return AgentOrder(site, node, "42", token, "target", sha)


async def test_a_rollouts_driver_unit_runs_through_the_agents_executor(
    world: World, bus: AgentBus
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
    ran = [argv[:2] for argv in host(w, node).ran]
    assert ran == [("apt-get", "download"), ("apt-get", "install"), ("systemctl", "reboot")]
    assert host(w, node).ran[0][2] == f"nvidia-driver={NEW}"
    assert agent_ledger(w, node) == ["install-driver", "reboot"]


async def test_bytes_that_are_not_the_attested_package_are_refused_and_nothing_installed(
    world: World, bus: AgentBus
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
    assert [argv[:2] for argv in host(w, node).ran] == [("apt-get", "download")]


async def test_a_call_resent_with_the_same_order_runs_once(world: World, bus: AgentBus) -> None:
    """A step retried after a crash sends the call it had sent: the same work item, attempt
    and call make the same command id, and the agent answers it from its journal."""
    w, node = world, world.rt.fleet[2].id
    order = _order(world, node)
    first = await bus.agent.install_driver(order, NEW)
    again = await bus.agent.install_driver(order, NEW)
    assert first == again and first.driver == NEW
    installs = [a for a in host(w, node).ran if a[:2] == ("apt-get", "install")]
    assert len(installs) == 1


async def test_a_lapsed_fencing_token_is_refused_and_nothing_runs(
    world: World, bus: AgentBus
) -> None:
    w, node = world, world.rt.fleet[3].id
    await bus.agent.install_driver(_order(w, node, token=8), NEW)
    ran = list(host(w, node).ran)
    with pytest.raises(AgentRefused, match="fencing token 7 of work item 42 has lapsed"):
        await bus.agent.reboot(_order(w, node, token=7))
    assert host(w, node).ran == ran


async def test_the_fallback_branch_no_bundle_attests_is_never_sent(
    world: World, bus: AgentBus
) -> None:
    w, node = world, world.rt.fleet[0].id
    fallback = AgentOrder(w.rt.fleet[0].site, node, "42", 7, "fallback", None)
    with pytest.raises(AgentRefused, match="no attested package"):
        await bus.agent.install_driver(fallback, OLD)
    assert host(w, node).ran == []


async def test_only_a_node_a_command_reached_opens_its_journal(world: World, bus: AgentBus) -> None:
    """A simulated fleet of thousands keeps no journal open for nodes no command reaches."""
    w = world
    assert w.rt.commands_dir is not None
    journals = {n.id: w.rt.commands_dir / n.id / "commands.sqlite" for n in w.rt.fleet}
    assert not any(j.exists() for j in journals.values())
    node = w.rt.fleet[1].id
    assert (await bus.agent.state(_order(w, node))).driver == OLD
    assert [n for n, j in journals.items() if j.exists()] == [node]
