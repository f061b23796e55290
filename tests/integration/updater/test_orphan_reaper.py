"""The orphaned-drain reaper (``Executor.reap``) on the simulator's scheduler, reliability.md
section 7 E3: an updater that dies holding a drained node, and is never restarted, does not
leave the node cordoned without an owner. (The same against real Slurm:
test_slurm_scheduler.py.)"""

from __future__ import annotations

import pytest

from lockstep_common.events.v1 import DeviceFailed
from lockstep_updater.domain.steps import NodeStep
from lockstep_updater.executor import Executor
from lockstep_updater.ports import OWNER
from lockstep_updater.store import Claim
from tests.integration.sim.pldm_fixtures import NEW_GPU_VERSION
from tests.integration.updater.conftest import FAST, World
from tests.integration.updater.test_executor_sim import nodes_of, plan_and_release

pytestmark = pytest.mark.integration
TTL_S = 300.0


async def drained_then_dead(w: World, node: str) -> tuple[Executor, Claim]:
    """Run the updater until ``node`` is drained and its activation is next; then a worker
    claims that step and dies (its lease is never renewed)."""
    ex = w.executor(one_step_a_claim=True)
    await plan_and_release(w, (node,))
    for _ in range(500):
        if w.store.item(node).state is NodeStep.ACTIVATING:
            break
        if not await ex.step():
            w.store.advance(FAST.retry_s)
    async with w.store.transaction() as tx:
        claim = await tx.claim(FAST.lease_s)
    assert claim is not None and claim.state is NodeStep.ACTIVATING
    drain = w.rt.scheduler.node(node).drain
    assert drain is not None and drain.by == OWNER
    return ex, claim


async def test_a_drain_held_by_a_dead_worker_is_given_back_after_the_ttl(world: World) -> None:
    w = world
    (node,) = nodes_of(w, 1)
    ex, _ = await drained_then_dead(w, node)
    w.store.advance(FAST.lease_s + TTL_S - 1)  # the lease lapsed, but not yet for the TTL
    assert await ex.reap(TTL_S) == 0
    assert w.rt.scheduler.node(node).drain is not None
    w.store.advance(1)
    assert await ex.reap(TTL_S) == 2  # taken, then given back (uncordoning) at once
    item = w.store.item(node)
    assert item.state is NodeStep.FAILED
    assert item.reason == (
        "orphaned: no worker held the activating step for 300s; Lockstep's drain given back"
    )
    assert w.rt.scheduler.node(node).drain is None
    assert w.gpu_versions(node) != {NEW_GPU_VERSION}  # never switched in
    (failed,) = [e for e in w.store.events.events if isinstance(e, DeviceFailed)]
    assert failed.step == "activating" and failed.reason.startswith("orphaned:")


async def test_a_worker_that_keeps_its_lease_is_never_reaped(world: World) -> None:
    w = world
    (node,) = nodes_of(w, 1)
    ex, claim = await drained_then_dead(w, node)
    for _ in range(20):  # alive: the lease is renewed every third of it, for 20 thirds
        w.store.advance(FAST.lease_s / 3)
        async with w.store.transaction() as tx:
            assert await tx.still_holds(claim, FAST.lease_s)
        assert await ex.reap(TTL_S) == 0
    assert w.store.item(node).state is NodeStep.ACTIVATING
    assert w.rt.scheduler.node(node).drain is not None


async def test_a_node_whose_activation_may_have_been_sent_stays_out_quarantined(
    world: World,
) -> None:
    w = world
    (node,) = nodes_of(w, 1)
    ex, claim = await drained_then_dead(w, node)
    async with w.store.transaction() as tx:  # died right after recording the activation
        await tx.save_progress(claim, {**claim.progress, "activate_sent": True})
    w.store.advance(FAST.lease_s + TTL_S)
    assert await ex.reap(TTL_S) == 1
    item = w.store.item(node)
    assert item.state is NodeStep.QUARANTINED
    assert "the firmware may have changed, kept out of service" in item.reason
    drain = w.rt.scheduler.node(node).drain
    assert drain is not None and drain.by == OWNER  # out of service, owned by the quarantine
