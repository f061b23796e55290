"""A node parked for its pool's budget is not re-checked on a timer of its own: the worker's
per-pool sweep wakes it (issue 28 item 3, "replace the per-node budget re-check net with a
per-pool sweep"), and the wake on a freed place still comes first."""

from __future__ import annotations

import asyncio

import pytest

from lockstep_updater.domain.steps import NodeStep
from tests.integration.updater.conftest import FAST, World
from tests.integration.updater.test_executor_sim import plan_and_release

pytestmark = pytest.mark.integration


async def test_a_parked_node_waits_for_the_sweep_not_for_a_timer_of_its_own(world: World) -> None:
    w = world
    pool = w.rt.fleet[0].pool
    nodes = tuple(n.id for n in w.rt.fleet if n.pool == pool)[:2]
    await plan_and_release(w, nodes, max_unavailable=1)
    ex, other = w.executor(), w.executor()
    for _ in range(500):  # until one node holds the pool's place and the other waits for it
        if any(i.parked for i in w.store.items):
            break
        if not any(await asyncio.gather(ex.step(), other.step())):
            w.store.advance(FAST.retry_s)
    (parked,) = [i.node_id for i in w.store.items if i.parked]
    assert w.store.item(parked).state is NodeStep.CORDONING

    w.store.advance(FAST.budget_recheck_s + 1)  # a re-check of its own was due by now
    async with w.store.transaction() as tx:
        claimed = [c.node_id for _ in nodes if (c := await tx.claim(FAST.lease_s)) is not None]
    assert parked not in claimed
    w.store.advance(FAST.lease_s + 1)  # those claims lapse; nothing was run under them

    assert await ex.sweep_parked() == 1  # the pool's sweep wakes it (no free place: one)
    async with w.store.transaction() as tx:
        woken = [c.node_id for _ in nodes if (c := await tx.claim(FAST.lease_s)) is not None]
    assert parked in woken
