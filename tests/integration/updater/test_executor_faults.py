"""The executor against a misbehaving simulator and a corrupted store: a device that reports
another version after the flash, a failed flash, a BMC that reboots mid-task, a 503 on the
push, a work item outside the approved plan, and a halt while a node drains."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

import pytest

from lockstep_common.envelope import make_envelope
from lockstep_common.events.v1 import (
    DeviceFailed,
    RolloutHalted,
    WavePlanned,
)
from lockstep_common.fleet_query import InventoryUnavailable
from lockstep_common.vocabulary import Component
from lockstep_sim.faults import Fault, FaultPlan
from lockstep_updater.domain.remedy import RemedyPolicy
from lockstep_updater.domain.steps import NodeStep
from lockstep_updater.handlers import Handlers
from lockstep_updater.ports import OWNER, DrainState
from lockstep_updater.testing.sim_fleet import sim_executor
from tests.integration.sim.pldm_fixtures import NEW_GPU_VERSION
from tests.integration.updater.conftest import ENV, FAST, ROLLOUT, World
from tests.integration.updater.test_executor_sim import PLANNER, nodes_of, plan_and_release

HANDLERS = Handlers(RemedyPolicy.AUTOMATIC)
NOW = datetime(2026, 3, 2, 12, tzinfo=UTC)  # handlers are given the time

pytestmark = pytest.mark.integration


async def test_another_version_read_back_quarantines_the_node_out_of_service(
    world: World,
) -> None:
    w = world
    (node,) = nodes_of(w, 1)
    w.rt.simulator.set_faults(
        FaultPlan((Fault("wrong_version", components=("HGX_FW_GPU_1",), version="97.00.52.00.01"),))
    )
    await plan_and_release(w, (node,))
    await w.settle()
    item = w.store.item(node)
    assert item.state is NodeStep.QUARANTINED
    assert "not verified" in item.reason and "HGX_FW_GPU_1" in item.reason
    drain = w.rt.scheduler.node(node).drain
    assert drain is not None and drain.by == OWNER  # stays out of service, with the reason
    assert len(w.pushes(node)) == 1
    (failed,) = [e for e in w.store.events.events if isinstance(e, DeviceFailed)]
    assert (failed.step, failed.component) == ("verifying", Component.GPU_VBIOS)


async def test_a_failed_flash_fails_the_node_before_it_leaves_service(world: World) -> None:
    w = world
    (node,) = nodes_of(w, 1)
    w.rt.simulator.set_faults(FaultPlan((Fault("failed_flash", components=("HGX_FW_GPU_0",)),)))
    await plan_and_release(w, (node,))
    await w.settle()
    item = w.store.item(node)
    assert item.state is NodeStep.FAILED
    assert len(w.pushes(node)) == 1  # never sent again
    assert w.rt.scheduler.node(node).drain is None
    assert not any(e.node_id == node and e.by == OWNER for e in w.rt.scheduler.ledger)


async def test_a_bmc_rebooting_mid_task_is_waited_for_never_pushed_again(world: World) -> None:
    w = world
    (node,) = nodes_of(w, 1)
    w.rt.simulator.set_faults(
        FaultPlan((Fault("bmc_reboot_mid_task", duration_minutes=30, count=1),))
    )
    await plan_and_release(w, (node,))
    await w.settle()
    assert w.store.item(node).state is NodeStep.DONE
    assert len(w.pushes(node)) == 1
    assert w.gpu_versions(node) == {NEW_GPU_VERSION}


async def test_a_503_on_the_push_is_sent_again_and_accepted_once(world: World) -> None:
    w = world
    (node,) = nodes_of(w, 1)
    w.rt.simulator.set_faults(FaultPlan((Fault("http_5xx", status=503, retry_after=0, count=1),)))
    await plan_and_release(w, (node,))
    await w.settle()
    assert w.store.item(node).state is NodeStep.DONE
    assert len(w.pushes(node)) == 1


async def test_a_work_item_outside_the_approved_plan_is_refused_by_the_executor(
    world: World,
) -> None:
    """Defence in depth: even a wave that reached the store without the handler's check (a
    corrupted row, a bug) is refused at the first mutating action."""
    w = world
    planned, stranger = nodes_of(w, 2)
    await plan_and_release(w, (planned,))
    async with w.store.transaction() as tx:
        await tx.record_wave(
            WavePlanned(
                rollout_id=ROLLOUT,
                wave=1,
                node_ids=(stranger,),
                components=(Component.GPU_VBIOS,),
                max_unavailable=1,
                failure_budget=0,
                soak_seconds=0,
            ),
            None,
        )
    await w.settle()
    item = w.store.item(stranger)
    assert item.state is NodeStep.FAILED
    assert item.reason == f"refused: {stranger} is not in the approved plan"
    assert w.pushes(stranger) == []
    assert not any(e.node_id == stranger for e in w.rt.scheduler.ledger)
    assert w.store.item(planned).state is NodeStep.DONE


class HaltingScheduler:
    """The simulator's scheduler, with the rollout halted the moment a drain completes."""

    def __init__(self, inner: Any, world: World) -> None:
        self.inner, self.world = inner, world

    async def cordon(self, node_id: str, reason: str) -> None:
        await self.inner.cordon(node_id, reason)

    async def drain_state(self, node_id: str) -> DrainState:
        state: DrainState = await self.inner.drain_state(node_id)
        if state is DrainState.DRAINED:
            halt = RolloutHalted(rollout_id=ROLLOUT, wave=0, reason="xid 79", halted_by="gate")
            async with self.world.store.transaction() as tx:
                await HANDLERS.rollout_halted(tx, make_envelope(halt, source=PLANNER), now=NOW)
        return state

    async def resume(self, node_id: str) -> bool:
        result: bool = await self.inner.resume(node_id)
        return result


async def test_a_halt_while_draining_activates_nothing_and_gives_the_node_back(
    world: World,
) -> None:
    w = world
    (node,) = nodes_of(w, 1)
    await plan_and_release(w, (node,))
    ex = w.executor()
    ex.scheduler = HaltingScheduler(ex.scheduler, w)
    await w.settle(ex)
    item = w.store.item(node)
    assert item.state is NodeStep.CANCELLED
    assert "rollout halted: gate: xid 79" in item.reason
    assert w.actions(node, "UpdateService.Activate") == []
    assert w.rt.scheduler.node(node).drain is None
    assert len(w.pushes(node)) == 1  # staged into the inactive bank: harmless, not running


async def test_a_bmc_that_never_answers_fails_the_node_after_bounded_retries(
    world: World,
) -> None:
    w = world
    (node,) = nodes_of(w, 1)
    # Nothing listens there: every connection is refused, so nothing can have been sent.
    w.facts.nodes[node] = w.facts.nodes[node].model_copy(update={"bmc_url": "http://127.0.0.1:9"})
    await plan_and_release(w, (node,))
    await w.settle()
    item = w.store.item(node)
    assert item.state is NodeStep.FAILED
    assert item.reason.startswith(f"gave up after {FAST.max_errors} retries: ")
    assert w.pushes(node) == []
    assert w.rt.scheduler.node(node).drain is None


class SilentInventory:
    """The node's facts, with the inventory not answering the first ``times`` questions (a
    ``fleet.query`` timeout, as an overloaded inventory gives)."""

    def __init__(self, inner: Any, times: int) -> None:
        self.inner, self.times = inner, times

    async def node(self, node_id: str) -> Any:
        if self.times > 0:
            self.times -= 1
            raise InventoryUnavailable("fleet.query: no answer within 5s")
        return await self.inner.node(node_id)


async def test_an_inventory_that_does_not_answer_holds_the_node_back_and_fails_nothing(
    world: World,
) -> None:
    """The control plane, not the node, is at fault: more silent answers than ``max_errors``
    do not fail the node into its wave's failure budget, nothing is sent meanwhile, and the
    pause between questions grows (a whole wave asking every ``retry_s`` kept a loaded
    inventory overloaded at 12,500 nodes)."""
    w = world
    (node,) = nodes_of(w, 1)
    await plan_and_release(w, (node,))
    ex = w.executor()
    silent = FAST.max_errors + 5
    ex.facts = SilentInventory(ex.facts, silent)
    pauses = []
    for _ in range(silent):
        assert await ex.step()
        item = w.store.item(node)
        assert item.state is NodeStep.PREFLIGHT  # claimed, and waiting before its first check
        assert item.reason == "waiting for the inventory: fleet.query: no answer within 5s"
        assert item.lease_until is not None
        pauses.append((item.lease_until - w.store.now).total_seconds())
        assert not await ex.step()  # not asked again before the pause ends
        w.store.advance(pauses[-1])
    assert w.pushes(node) == []
    assert not any(e.node_id == node for e in w.rt.scheduler.ledger)
    assert FAST.retry_s / 2 <= pauses[0] <= FAST.retry_s
    assert pauses[-1] >= FAST.inventory_backoff_max_s / 2
    assert max(pauses) <= FAST.inventory_backoff_max_s
    await w.settle(ex)
    assert w.store.item(node).state is NodeStep.DONE
    assert len(w.pushes(node)) == 1


class LateCordon:
    """The simulator's scheduler, whose first cordon takes effect late: meanwhile the worker's
    lease lapses and another worker takes the item over, drains, flashes and gives the node
    back (shrunk from the chaos test: slow_scheduler, then expire_leases)."""

    def __init__(self, inner: Any, world: World) -> None:
        self.inner, self.world, self.late = inner, world, True

    async def cordon(self, node_id: str, reason: str) -> None:
        if self.late:
            self.late = False
            self.world.store.advance(FAST.lease_s + 1)  # the lease lapses
            await self.world.settle(self.world.executor())  # another worker ends the node
        await self.inner.cordon(node_id, reason)  # ... and then the late cordon lands

    async def drain_state(self, node_id: str) -> DrainState:
        state: DrainState = await self.inner.drain_state(node_id)
        return state

    async def resume(self, node_id: str) -> bool:
        result: bool = await self.inner.resume(node_id)
        return result


async def test_a_late_cordon_of_a_worker_that_lost_its_item_is_given_back(world: World) -> None:
    w = world
    (node,) = nodes_of(w, 1)
    await plan_and_release(w, (node,))
    stale = w.executor()
    stale.scheduler = LateCordon(stale.scheduler, w)
    while await stale.step():  # preflight, staging, cordoning, then the draining step
        if w.store.item(node).state is NodeStep.DONE:
            break
    item = w.store.item(node)
    assert item.state is NodeStep.DONE and len(w.pushes(node)) == 1
    assert w.rt.scheduler.node(node).drain is None  # not left cordoned by Lockstep
    drains = [e.action for e in w.rt.scheduler.ledger if e.node_id == node and e.by == OWNER]
    assert drains == ["drain", "resume", "drain", "resume"]


async def _run_until(w: World, executor: Any, node: str, state: NodeStep) -> None:
    for _ in range(3000):
        if w.store.item(node).state is state:
            return
        if not await executor.step():
            w.store.advance(FAST.retry_s)
    raise AssertionError(f"{node} never reached {state}")


async def test_a_bmc_resetting_after_activation_is_waited_for_then_verified(
    world: World,
) -> None:
    # A real BMC resets after the activation's task ended and refuses even a login for minutes
    # (reliability.md 7.D2): the node waits for it, in turns, then verifies.
    w = world
    (node,) = nodes_of(w, 1)
    await plan_and_release(w, (node,))
    ex = w.executor(one_step_a_claim=True)
    await _run_until(w, ex, node, NodeStep.AWAITING_BMC)
    w.rt.simulator.bmc(node).go_offline(0.5)
    await w.settle(ex)
    assert w.store.item(node).state is NodeStep.DONE
    assert len(w.pushes(node)) == 1 and w.gpu_versions(node) == {NEW_GPU_VERSION}
    async with w.store.transaction() as tx:
        waits = [r for r in await tx.history(node, 500) if r.step == r.outcome == "awaiting_bmc"]
    assert waits and all(r.reason.startswith("waiting for the BMC: ") for r in waits)


async def test_a_bmc_dark_past_the_reachable_bound_quarantines_its_node(world: World) -> None:
    w = world
    (node,) = nodes_of(w, 1)
    await plan_and_release(w, (node,))
    policy = dataclasses.replace(FAST, update=dataclasses.replace(FAST.update, reachable_s=0.2))
    ex = sim_executor(w.rt, w.store, w.facts, w.bundle, policy, ENV)
    ex.chains = lambda: False  # stop at the step, as a stopping worker does
    await _run_until(w, ex, node, NodeStep.AWAITING_BMC)
    w.rt.simulator.bmc(node).go_offline(60)
    await w.settle(ex)
    item = w.store.item(node)
    assert item.state is NodeStep.QUARANTINED
    assert item.reason.startswith("the BMC did not come back within 0.2s: ")
    assert w.rt.scheduler.node(node).drain is not None  # kept out of service
