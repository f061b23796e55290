"""The executor's maintenance-window check on the simulator (issue 27, item 4): outside its
pool's or site's windows a node is left alone (nothing pushed, nothing drained), its work
starts when a window opens, and a node already out of service finishes after one closes."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from lockstep_updater.domain.steps import NodeStep
from lockstep_updater.executor import Executor
from lockstep_updater.ports import OWNER
from tests.integration.updater.conftest import FAST, World
from tests.integration.updater.test_executor_sim import nodes_of, plan_and_release

pytestmark = pytest.mark.integration
NOON = datetime(2026, 3, 2, 12, tzinfo=UTC)  # a Monday
NIGHT = datetime(2026, 3, 2, 23, tzinfo=UTC)


class Clock:
    def __init__(self, at: datetime) -> None:
        self.at = at

    def __call__(self) -> datetime:
        return self.at


async def declare(w: World, scope: str, name: str, *windows: str) -> None:
    async with w.store.transaction() as tx:
        await tx.record_maintenance(scope, name, "UTC", windows or None, NOON)


async def steps(w: World, ex: Executor, count: int) -> None:
    for _ in range(count):
        if not await ex.step():
            w.store.advance(FAST.budget_recheck_s)


def drains(w: World, node: str) -> list[str]:
    return [e.action for e in w.rt.scheduler.ledger if e.node_id == node and e.by == OWNER]


@pytest.mark.parametrize("scope", ["pool", "site"])
async def test_outside_its_window_a_node_is_left_alone_until_one_opens(
    world: World, scope: str
) -> None:
    w = world
    (node,) = nodes_of(w, 1)
    fleet_node = await w.facts.node(node)
    assert fleet_node is not None
    await declare(
        w, scope, fleet_node.pool if scope == "pool" else fleet_node.site, "daily 22:00-06:00"
    )
    clock = Clock(NOON)
    ex = w.executor()
    ex.clock = clock
    await plan_and_release(w, (node,))
    await steps(w, ex, 20)
    item = w.store.item(node)
    assert item.state is NodeStep.PREFLIGHT
    assert f"{scope} " in item.reason and "outside its maintenance windows" in item.reason
    assert "the next opens 2026-03-02T22:00:00+00:00" in item.reason
    assert w.pushes(node) == [] and drains(w, node) == []
    clock.at = NIGHT
    await w.settle(ex)
    assert w.store.item(node).state is NodeStep.DONE
    assert len(w.pushes(node)) == 1 and drains(w, node) == ["drain", "resume"]


async def test_a_node_taken_out_inside_its_window_finishes_after_it_closes(world: World) -> None:
    w = world
    (node,) = nodes_of(w, 1)
    fleet_node = await w.facts.node(node)
    assert fleet_node is not None
    await declare(w, "pool", fleet_node.pool, "daily 22:00-06:00")
    clock = Clock(NIGHT)
    ex = w.executor(one_step_a_claim=True)
    ex.clock = clock
    await plan_and_release(w, (node,))
    for _ in range(200):
        if w.store.item(node).state is NodeStep.DRAINING:
            break
        if not await ex.step():
            w.store.advance(FAST.retry_s)
    assert w.store.item(node).state is NodeStep.DRAINING  # its cordon passed inside the window
    clock.at = NOON  # the window closes with the node out of service
    await w.settle(ex)
    assert w.store.item(node).state is NodeStep.DONE
    assert drains(w, node) == ["drain", "resume"]


async def test_a_cleared_or_unrelated_window_holds_nothing(world: World) -> None:
    w = world
    (node,) = nodes_of(w, 1)
    fleet_node = await w.facts.node(node)
    assert fleet_node is not None
    await declare(w, "pool", "another-pool", "daily 22:00-06:00")
    async with w.store.transaction() as tx:
        # Set, then cleared by a later announcement; an older one arriving late changes nothing.
        await tx.record_maintenance("pool", fleet_node.pool, "UTC", None, NIGHT)
        kept = await tx.record_maintenance(
            "pool", fleet_node.pool, "UTC", ("daily 22:00-06:00",), NOON
        )
    assert not kept
    ex = w.executor()
    ex.clock = Clock(NOON)
    await plan_and_release(w, (node,))
    await w.settle(ex)
    assert w.store.item(node).state is NodeStep.DONE
