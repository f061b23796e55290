"""One Redfish session per node for its whole update (issue 28 item 3): a node's steps share
one login, a BMC that forgot the session is logged in again, and the session is logged out when
the update ends or its claim is lost."""

from __future__ import annotations

import asyncio

import pytest

from lockstep_updater.domain.steps import NodeStep
from lockstep_updater.steps.bmc_sessions import KeptSession
from tests.integration.updater.conftest import FAST, World
from tests.integration.updater.test_executor_sim import nodes_of, plan_and_release

pytestmark = pytest.mark.integration


def logins(w: World, node: str) -> int:
    """Sessions the node's BMC created (POST .../Sessions that succeeded)."""
    return w.rt.simulator.bmc(node).sessions.counter


def open_sessions(w: World, node: str) -> int:
    return len(w.rt.simulator.bmc(node).sessions.by_token)


async def test_a_node_logs_in_once_for_its_whole_update_and_out_at_its_end(world: World) -> None:
    w = world
    nodes = nodes_of(w, 2)
    await plan_and_release(w, nodes)
    await w.settle()
    assert [i.state for i in w.store.items] == [NodeStep.DONE] * 2
    for node in nodes:
        # preflight, staging, activating, awaiting the BMC and verifying: one login for all
        assert logins(w, node) == 1
        assert open_sessions(w, node) == 0


async def test_a_request_answered_401_logs_in_again_and_is_repeated(world: World) -> None:
    w = world
    (node,) = nodes_of(w, 1)
    ex = w.executor()
    fleet_node = w.facts.nodes[node]
    ex.ctx.credentials.learn(fleet_node)  # as a step's read of the node does
    async with ex.ctx.session(fleet_node) as bmc:
        w.rt.simulator.bmc(node).sessions.by_token.clear()  # the BMC rebooted: 401 from now on
        reply = await bmc.get("/redfish/v1/UpdateService/FirmwareInventory")
    assert reply.status == 200
    assert (logins(w, node), open_sessions(w, node)) == (2, 1)  # kept for the next step


async def test_an_update_goes_on_after_its_bmc_forgot_the_kept_session(world: World) -> None:
    w = world
    (node,) = nodes_of(w, 1)
    await plan_and_release(w, (node,))
    ex = w.executor(one_step_a_claim=True)
    assert await ex.step()  # preflight: logged in, the session kept
    assert (logins(w, node), open_sessions(w, node)) == (1, 1)
    w.rt.simulator.bmc(node).sessions.by_token.clear()  # the BMC rebooted: 401 from now on
    await w.settle(ex)
    assert w.store.item(node).state is NodeStep.DONE
    assert logins(w, node) == 2
    assert open_sessions(w, node) == 0


async def test_a_lost_claim_logs_its_session_out(world: World) -> None:
    w = world
    (node,) = nodes_of(w, 1)
    await plan_and_release(w, (node,))
    ex = w.executor(one_step_a_claim=True)
    assert await ex.step()  # preflight: logged in, the session kept for staging
    assert open_sessions(w, node) == 1
    async with w.store.transaction() as tx:
        stale = await tx.claim(FAST.lease_s)
    assert stale is not None and stale.state is NodeStep.STAGING
    w.store.advance(FAST.lease_s + 1)  # its lease lapsed: another worker takes the item
    async with w.store.transaction() as tx:
        assert await tx.claim(FAST.lease_s) is not None
    await ex.run_on(stale)  # staging finds, before it pushes, that the item is not its own
    assert w.pushes(node) == []
    assert logins(w, node) == 1
    assert open_sessions(w, node) == 0


async def test_a_session_borrowed_while_others_are_logged_out_is_not_closed_under_it(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over the limit, idle sessions are logged out one at a time; a node's step borrowing its
    session meanwhile keeps it (found by ``bench rollout`` at 2,000 nodes: "Session is closed"
    in the middle of a step's request)."""
    w = world
    a, b, c = nodes_of(w, 3)
    ex = w.executor()
    sessions = ex.ctx.sessions
    for node in (a, b, c):
        ex.ctx.credentials.learn(w.facts.nodes[node])
    for node in (a, b):
        async with ex.ctx.session(w.facts.nodes[node]):
            pass
    first_out = asyncio.Event()
    let_go = asyncio.Event()
    close = KeptSession.close

    async def slow_close(self: KeptSession) -> None:
        if self.target.node_id == a:  # the first logout of the trim waits on the BMC
            first_out.set()
            await let_go.wait()
        await close(self)

    monkeypatch.setattr(KeptSession, "close", slow_close)
    sessions.limit = 1

    async def step_of_c() -> None:  # its end trims the two idle sessions before it: a, b
        async with ex.ctx.session(w.facts.nodes[c]):
            pass

    trimming = asyncio.create_task(step_of_c())
    await first_out.wait()
    async with ex.ctx.session(w.facts.nodes[b]) as bmc:  # b's step starts meanwhile
        let_go.set()
        await trimming
        reply = await bmc.get("/redfish/v1/UpdateService/FirmwareInventory")
    assert reply.status == 200
    assert sessions.get(b) is bmc and open_sessions(w, b) == 1
    assert open_sessions(w, a) == 0
