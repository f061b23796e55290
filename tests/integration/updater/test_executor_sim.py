"""The updater's executor on the simulator: a wave goes from wave.planned to verified
firmware, each push accepted exactly once per node and version (the BMC ledger), with the
scheduler's drains made and undone by Lockstep only."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from datetime import UTC, datetime

import aiohttp
import pytest

from lockstep_common.envelope import make_envelope, source_of
from lockstep_common.events.v1 import (
    DeviceFailed,
    DeviceStaged,
    DeviceVerified,
    RolloutHalted,
    RolloutPlanned,
    WaveCompleted,
    WavePlan,
    WavePlanned,
)
from lockstep_common.vocabulary import ChangeClass, Component
from lockstep_redfish.image_server import ImageServer
from lockstep_updater.adapters.sim_scheduler import SimScheduler
from lockstep_updater.domain.remedy import RemedyPolicy
from lockstep_updater.domain.steps import NodeStep
from lockstep_updater.handlers import Handlers
from lockstep_updater.ports import OWNER
from lockstep_updater.testing.sim_fleet import sim_executor
from tests.integration.sim.pldm_fixtures import NEW_GPU_VERSION
from tests.integration.updater.conftest import ENV, FAST, ROLLOUT, STACK, World

HANDLERS = Handlers(RemedyPolicy.AUTOMATIC)
NOW = datetime(2026, 3, 2, 12, tzinfo=UTC)  # handlers are given the time

pytestmark = pytest.mark.integration
PLANNER = source_of("planner")


async def plan_and_release(
    w: World,
    nodes: tuple[str, ...],
    *,
    max_unavailable: int = 1,
    stack: str = STACK,
    components: tuple[Component, ...] = (Component.GPU_VBIOS,),
    reflash: tuple[Component, ...] = (),
) -> None:
    planned = RolloutPlanned(
        rollout_id=ROLLOUT,
        intent_id=uuid.uuid4(),
        stack_hash=stack,
        change_class=ChangeClass.STANDARD,
        waves=(WavePlan(number=0, node_ids=nodes),),
    )
    wave = WavePlanned(
        rollout_id=ROLLOUT,
        wave=0,
        node_ids=nodes,
        components=components,
        max_unavailable=max_unavailable,
        failure_budget=0,
        soak_seconds=0,
        reflash=reflash,
    )
    async with w.store.transaction() as tx:
        await HANDLERS.rollout_planned(tx, make_envelope(planned, source=PLANNER), now=NOW)
        await HANDLERS.wave_planned(
            tx, make_envelope(wave, source=PLANNER, correlation_id="c1"), now=NOW
        )


def nodes_of(w: World, count: int) -> tuple[str, ...]:
    return tuple(n.id for n in w.rt.fleet[:count])


async def test_a_wave_is_staged_drained_activated_verified_and_given_back(world: World) -> None:
    w = world
    nodes = nodes_of(w, 2)
    await plan_and_release(w, nodes)
    await w.settle()
    assert [(i.node_id, i.state) for i in w.store.items] == [(n, NodeStep.DONE) for n in nodes]
    for node in nodes:
        assert w.gpu_versions(node) == {NEW_GPU_VERSION}
        (push,) = w.pushes(node)
        assert push["stage"] is True
        sched = w.rt.scheduler.node(node)
        assert sched.drain is None  # given back
        assert [e.action for e in w.rt.scheduler.ledger if e.node_id == node and e.by == OWNER] == [
            "drain",
            "resume",
        ]
    kinds = [type(e).__name__ for e in w.store.events.events]
    assert kinds.count("DeviceStaged") == 2 and kinds.count("DeviceVerified") == 2
    completed = w.store.events.events[-1]
    assert isinstance(completed, WaveCompleted)
    assert (completed.succeeded, completed.failed) == (nodes, ())
    verified = [e for e in w.store.events.events if isinstance(e, DeviceVerified)]
    assert all(v.to_version == NEW_GPU_VERSION and v.from_version != NEW_GPU_VERSION
               for v in verified)  # fmt: skip


async def test_a_node_already_at_the_target_is_done_without_a_write(world: World) -> None:
    w = world
    (node,) = nodes_of(w, 1)
    for member, comp in w.rt.simulator.bmc(node).node.components.items():
        if member.startswith("HGX_FW_GPU_"):
            comp.version = NEW_GPU_VERSION
    await plan_and_release(w, (node,))
    await w.settle()
    assert w.store.item(node).state is NodeStep.DONE
    assert w.pushes(node) == []
    assert [e for e in w.rt.scheduler.ledger if e.node_id == node and e.by == OWNER] == []


async def test_an_image_changed_since_attestation_fails_closed(world: World) -> None:
    w = world
    (node,) = nodes_of(w, 1)
    image = w.bundle / "images" / "gpu.fwpkg"
    image.write_bytes(image.read_bytes()[:-1] + b"\x00")
    await plan_and_release(w, (node,))
    await w.settle()
    item = w.store.item(node)
    assert item.state is NodeStep.FAILED
    assert "is not the attested" in item.reason and "nothing was sent" in item.reason
    assert w.pushes(node) == []


async def test_a_foreign_drain_is_left_untouched(world: World) -> None:
    w = world
    (node,) = nodes_of(w, 1)
    w.rt.scheduler.drain(node, "hardware ticket 4711", "ops")
    await plan_and_release(w, (node,))
    await w.settle()
    item = w.store.item(node)
    assert item.state is NodeStep.FAILED and "drained by 'ops'" in item.reason
    drain = w.rt.scheduler.node(node).drain
    assert drain is not None and (drain.by, drain.reason) == ("ops", "hardware ticket 4711")
    assert not any(e.by == OWNER for e in w.rt.scheduler.ledger if e.node_id == node)
    # Counted failed in the wave's result, but no device failed: nothing for the gate to blame.
    assert [e for e in w.store.events.events if isinstance(e, DeviceFailed)] == []
    (done,) = [e for e in w.store.events.events if isinstance(e, WaveCompleted)]
    assert done.failed == (node,) and done.succeeded == ()


async def test_the_pool_budget_holds_one_node_out_at_a_time(world: World) -> None:
    w = world
    pool = w.rt.fleet[0].pool
    nodes = tuple(n.id for n in w.rt.fleet if n.pool == pool)[:2]
    await plan_and_release(w, nodes, max_unavailable=1)
    out_at_each_cordon: list[int] = []

    class Watched(SimScheduler):
        async def cordon(self, node_id: str, reason: str) -> None:
            await super().cordon(node_id, reason)
            drained = [n for n in nodes if w.rt.scheduler.node(n).drain is not None]
            out_at_each_cordon.append(len(drained))

    # Two workers race for the pool's one place, each running its node's steps back to back.
    workers = [
        sim_executor(w.rt, w.store, w.facts, w.bundle, FAST, ENV, scheduler=Watched(url))
        for url in (w.rt.scheduler_url, w.rt.scheduler_url)
    ]
    for _ in range(3000):
        if all(i.state is NodeStep.DONE for i in w.store.items):
            break
        if not any(await asyncio.gather(*(ex.step() for ex in workers))):
            w.store.advance(1.0)
    assert all(i.state is NodeStep.DONE for i in w.store.items)
    assert out_at_each_cordon == [1, 1]


async def test_a_nodes_ready_steps_run_back_to_back_in_one_claim(world: World) -> None:
    # A step that moves its node on runs the next one itself: at fleet scale a node otherwise
    # queues behind every other node for each of its eight steps. It stops at the first wait
    # (the drain) and lets the item go; the next claim runs the rest.
    w = world
    (node,) = nodes_of(w, 1)
    await plan_and_release(w, (node,))
    ex = w.executor()
    assert await ex.step()
    assert w.store.item(node).state is NodeStep.DRAINING
    assert await ex.step()
    assert w.store.item(node).state is NodeStep.DONE
    async with w.store.transaction() as tx:
        steps = [(r.step, r.outcome) for r in await tx.history(node, 50)]
    assert steps[:3] == [
        ("preflight", "staging"),
        ("staging", "cordoning"),
        ("cordoning", "draining"),
    ]
    assert len(w.pushes(node)) == 1 and w.gpu_versions(node) == {NEW_GPU_VERSION}


async def test_a_stopping_worker_runs_one_step_and_keeps_nothing(world: World) -> None:
    w = world
    (node,) = nodes_of(w, 1)
    await plan_and_release(w, (node,))
    stopping = w.executor(one_step_a_claim=True)
    assert await stopping.step()
    assert w.store.item(node).state is NodeStep.STAGING
    # Nothing held: another worker claims the next step at once.
    other = w.executor()
    assert await other.step()
    assert w.store.item(node).state is NodeStep.DRAINING


async def test_a_node_waiting_for_budget_starts_as_soon_as_the_place_frees(world: World) -> None:
    # The store's clock never moves here: a node parked for its pool's budget is not polled
    # (its re-check is a minute away), it is woken by the step that gives the other node back.
    w = world
    pool = w.rt.fleet[0].pool
    nodes = tuple(n.id for n in w.rt.fleet if n.pool == pool)[:2]
    await plan_and_release(w, nodes, max_unavailable=1)
    first, second = w.executor(), w.executor()
    while any(await asyncio.gather(first.step(), second.step())):
        pass
    assert [i.state for i in w.store.items] == [NodeStep.DONE, NodeStep.DONE]
    async with w.store.transaction() as tx:
        waits = [
            r
            for n in nodes
            for r in await tx.history(n, 50)
            if (r.step, r.outcome) == ("cordoning", "cordoning")
        ]
    assert waits and all("max_unavailable" in r.reason for r in waits)


async def test_device_tasks_are_followed_in_turns_and_each_write_sent_once(
    world: World,
) -> None:
    # A worker gives a staging node back to the queue while the BMC's task runs (a GPU stages
    # for a quarter of an hour), and whoever claims it next follows the recorded task.
    w = world
    nodes = nodes_of(w, 2)
    await plan_and_release(w, nodes, max_unavailable=2)
    policy = dataclasses.replace(FAST, task_hold_s=0.001)
    first = sim_executor(w.rt, w.store, w.facts, w.bundle, policy, ENV)
    second = sim_executor(w.rt, w.store, w.facts, w.bundle, policy, ENV)
    for turn in range(3000):
        if all(i.state is NodeStep.DONE for i in w.store.items):
            break
        if not await (first, second)[turn % 2].step():
            w.store.advance(FAST.retry_s)
    assert [i.state for i in w.store.items] == [NodeStep.DONE, NodeStep.DONE]
    for node in nodes:
        assert len(w.pushes(node)) == 1 and w.gpu_versions(node) == {NEW_GPU_VERSION}
        async with w.store.transaction() as tx:
            history = await tx.history(node, 200)
        for step in ("staging", "activating"):  # both tasks were given back while running
            turns = [r for r in history if r.step == r.outcome == step]
            assert any("task is still running" in r.reason for r in turns), step
        activations = w.actions(node, "UpdateService.Activate")
        assert len(activations) == 1  # followed in turns, never sent again


async def test_a_halt_stops_new_pushes_and_cordons(world: World) -> None:
    w = world
    nodes = nodes_of(w, 2)
    await plan_and_release(w, nodes)
    async with w.store.transaction() as tx:
        halt = RolloutHalted(rollout_id=ROLLOUT, wave=0, reason="abort", halted_by="ops")
        await HANDLERS.rollout_halted(tx, make_envelope(halt, source=PLANNER), now=NOW)
    await w.settle()
    assert [i.state for i in w.store.items] == [NodeStep.CANCELLED, NodeStep.CANCELLED]
    for node in nodes:
        assert w.pushes(node) == []
        assert w.rt.scheduler.node(node).drain is None
    assert not any(isinstance(e, DeviceStaged) for e in w.store.events.events)
    assert isinstance(w.store.events.events[-1], WaveCompleted)


async def test_two_updaters_at_once_flash_each_node_once(world: World) -> None:
    w = world
    nodes = nodes_of(w, 4)
    await plan_and_release(w, nodes, max_unavailable=4)
    first, second = w.executor(), w.executor()

    async def both() -> None:
        for _ in range(3000):
            if all(i.state is NodeStep.DONE for i in w.store.items):
                return
            stepped = await asyncio.gather(first.step(), second.step())
            if not any(stepped):
                w.store.advance(1.0)

    await both()
    assert [i.state for i in w.store.items] == [NodeStep.DONE] * 4
    for node in nodes:
        assert len(w.pushes(node)) == 1
        assert w.gpu_versions(node) == {NEW_GPU_VERSION}


async def test_a_bmc_without_multipart_push_pulls_the_image_once_from_the_image_server(
    world: World,
) -> None:
    w = world
    (node,) = nodes_of(w, 1)
    w.rt.simulator.bmc(node).multipart_push = False  # UpdateService offers SimpleUpdate only
    await plan_and_release(w, (node,))
    async with ImageServer("127.0.0.1") as server:
        ex = w.executor()
        ex.image_server = server
        await w.settle(ex)
        assert list(server.fetches.values()) == [1]
        (url,) = server.urls.values()
        async with aiohttp.ClientSession() as http, http.get(url) as gone:
            assert gone.status == 404  # withdrawn once the task ended
    assert w.store.item(node).state is NodeStep.DONE
    pulls = [
        e
        for e in w.rt.simulator.bmc(node).ledger
        if e["action"] == "UpdateService.SimpleUpdate" and e.get("status") == 202
    ]
    assert len(pulls) == 1 and w.pushes(node) == []
    assert w.gpu_versions(node) == {NEW_GPU_VERSION}


async def test_without_an_image_server_such_a_bmc_fails_its_node_untouched(world: World) -> None:
    w = world
    (node,) = nodes_of(w, 1)
    w.rt.simulator.bmc(node).multipart_push = False
    await plan_and_release(w, (node,))
    await w.settle()
    item = w.store.item(node)
    assert item.state is NodeStep.FAILED and "SimpleUpdate needs an ImageServer" in item.reason
    assert w.rt.scheduler.node(node).drain is None
