"""The Slurm scheduler adapter and the executor against a real Slurm cluster (a private
slurmctld, one slurmd per node and munged on this host, ``slurm_cluster.py``), with the BMCs
simulated: reliability.md section 7 E2 (a long job keeps its node draining past the drain
deadline), E3 (an updater that dies after the drain and before the flash: the reaper gives
the drain back) and E4 (a node drained by someone else keeps their drain and reason).
Slurm's own log counts job kill requests: the updater never makes one."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from lockstep_common.events.v1 import DeviceActivated, DeviceFailed, WaveCompleted
from lockstep_updater.adapters.images import BundleImages
from lockstep_updater.adapters.slurm_scheduler import SlurmRefused, SlurmScheduler
from lockstep_updater.domain.steps import NodeStep
from lockstep_updater.executor import Executor, ExecutorPolicy
from lockstep_updater.ports import DrainState, ForeignDrain, Scheduler, SchedulerUnavailable
from tests.integration.sim.pldm_fixtures import NEW_GPU_VERSION
from tests.integration.updater.conftest import ENV, FAST, World
from tests.integration.updater.slurm_cluster import SlurmCluster
from tests.integration.updater.test_executor_sim import plan_and_release

pytestmark = pytest.mark.integration


def scheduler(slurm: SlurmCluster) -> SlurmScheduler:
    return SlurmScheduler(conf=str(slurm.conf), environ=slurm.env)


class Recording:
    """The Slurm adapter, remembering every drain state it answered."""

    def __init__(self, inner: SlurmScheduler) -> None:
        self.inner = inner
        self.seen: list[DrainState] = []

    async def cordon(self, node_id: str, reason: str) -> None:
        await self.inner.cordon(node_id, reason)

    async def drain_state(self, node_id: str) -> DrainState:
        state = await self.inner.drain_state(node_id)
        self.seen.append(state)
        return state

    async def resume(self, node_id: str) -> bool:
        return await self.inner.resume(node_id)


def executor(w: World, sched: Scheduler, policy: ExecutorPolicy = FAST) -> Executor:
    return Executor(
        w.store,
        w.facts,
        sched,
        BundleImages([w.bundle.parent]),
        policy,
        environ=ENV,
    )


# -- the adapter on its own ------------------------------------------------------------------


async def test_a_drain_is_lockstep_s_by_its_reason_and_given_back_only_then(
    slurm: SlurmCluster,
) -> None:
    ours, theirs = slurm.nodes[0], slurm.nodes[1]
    sched = scheduler(slurm)
    await sched.cordon(ours, "lockstep rollout r-7")
    await sched.cordon(ours, "a second call changes nothing")
    node = slurm.node(ours)
    assert (node.state, "DRAIN" in node.flags) == ("IDLE", True)
    assert node.reason == "lockstep-updater: lockstep rollout r-7"
    assert await sched.drain_state(ours) is DrainState.DRAINED

    slurm.drain(theirs, "hw ticket 42")
    before = slurm.node(theirs)
    with pytest.raises(ForeignDrain, match="hw ticket 42"):
        await sched.cordon(theirs, "lockstep rollout r-7")
    assert await sched.drain_state(theirs) is DrainState.NOT_DRAINED
    assert await sched.resume(theirs) is False
    assert slurm.node(theirs) == before
    assert await sched.own_drains() == [ours]  # what the reaper's stray sweep lists

    assert await sched.resume(ours) is True
    node = slurm.node(ours)
    assert "DRAIN" not in node.flags and node.reason is None
    assert await sched.resume(ours) is False  # nothing of Lockstep's left to undo
    assert await sched.own_drains() == []


async def test_a_node_slurm_does_not_know_is_refused_for_good(slurm: SlurmCluster) -> None:
    with pytest.raises(SlurmRefused, match="node-99999 not found"):
        await scheduler(slurm).drain_state("node-99999")


def elsewhere(slurm: SlurmCluster, tmp_path: Path, *extra: str) -> str:
    """The cluster's configuration with the controller's port pointing nowhere."""
    conf = tmp_path / "slurm.conf"
    text = slurm.conf.read_text()
    port = next(line for line in text.splitlines() if line.startswith("SlurmctldPort="))
    conf.write_text(text.replace(port, "SlurmctldPort=9") + "".join(f"{e}\n" for e in extra))
    return str(conf)


async def test_a_controller_that_cannot_be_reached_is_not_now(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    # scontrol gives up after MessageTimeout and says so: that message is "not now".
    conf = elsewhere(slurm, tmp_path, "MessageTimeout=2")
    sched = SlurmScheduler(conf=conf, environ=slurm.env, timeout_s=30)
    with pytest.raises(SchedulerUnavailable, match="Unable to contact slurm controller"):
        await sched.drain_state(slurm.nodes[0])


async def test_a_scontrol_that_does_not_return_in_time_is_stopped_and_not_now(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    sched = SlurmScheduler(conf=elsewhere(slurm, tmp_path), environ=slurm.env, timeout_s=0.5)
    with pytest.raises(SchedulerUnavailable, match=r"no answer within 0\.5s"):
        await sched.drain_state(slurm.nodes[0])


# -- E2: a long job ---------------------------------------------------------------------------


async def test_e2_a_long_job_keeps_its_node_draining_and_is_never_killed(
    world: World, slurm: SlurmCluster
) -> None:
    w = world
    node = slurm.nodes[0]
    job = slurm.long_job(node)
    kills = slurm.kill_requests()
    before = slurm.node(node)
    assert (before.state, before.reason) == ("ALLOCATED", None)
    sched = Recording(scheduler(slurm))
    ex = executor(w, sched, dataclasses.replace(FAST, drain_deadline_s=2.0))
    await plan_and_release(w, (node,))
    await w.settle(ex)

    item = w.store.item(node)
    assert item.state is NodeStep.FAILED and "not drained within 2s" in item.reason
    assert DrainState.DRAINING in sched.seen and DrainState.DRAINED not in sched.seen
    assert w.gpu_versions(node) != {NEW_GPU_VERSION}  # never flashed while draining
    assert not any(isinstance(e, DeviceActivated) for e in w.store.events.events)
    # Skipped, not a device failure: nothing on the node changed, so no device.failed for the
    # gate to blame the image for; the wave's result counts it failed.
    assert not any(isinstance(e, DeviceFailed) for e in w.store.events.events)
    assert item.reason.startswith("skipped: not drained within 2s")
    (completed,) = [e for e in w.store.events.events if isinstance(e, WaveCompleted)]
    assert completed.failed == (node,)
    after = slurm.node(node)  # the prior state back: running the job, no drain, no reason
    assert (after.state, after.reason, "DRAIN" in after.flags) == ("ALLOCATED", None, False)
    assert slurm.jobs()[job] == ("RUNNING", node)
    assert slurm.kill_requests() == kills == 0


# -- E3: an updater that dies after the drain, before the flash --------------------------------


async def test_e3_an_orphaned_drain_is_given_back_within_ttl_and_one_interval(
    world: World, slurm: SlurmCluster
) -> None:
    w = world
    node = slurm.nodes[1]
    ttl_s, interval_s = 300.0, 30.0
    ex = executor(w, scheduler(slurm))
    ex.chains = lambda: False  # stop at the activation, as a stopping worker's claim does
    await plan_and_release(w, (node,))
    for _ in range(200):  # run the updater until the node is drained, ready to activate
        if w.store.item(node).state is NodeStep.ACTIVATING:
            break
        if not await ex.step():
            w.store.advance(FAST.retry_s)
    assert slurm.node(node).drain_state() is DrainState.DRAINED
    async with w.store.transaction() as tx:  # a worker claims the activation and dies
        assert (await tx.claim(FAST.lease_s)) is not None
    lapsed_at = FAST.lease_s  # the dead worker's lease ends then; nobody renews it

    elapsed, released_at = 0.0, None
    while released_at is None and elapsed <= lapsed_at + ttl_s + 2 * interval_s:
        await ex.reap(ttl_s)  # one reconcile pass of a (live) updater's reaper
        if not slurm.node(node).drained:
            released_at = elapsed
            break
        assert w.store.item(node).state is NodeStep.ACTIVATING  # the drain is still owned
        w.store.advance(interval_s)
        elapsed += interval_s

    assert released_at is not None
    assert lapsed_at + ttl_s <= released_at <= lapsed_at + ttl_s + interval_s
    item = w.store.item(node)
    assert item.state is NodeStep.FAILED
    assert item.reason.startswith("orphaned: no worker held the activating step for 300s")
    assert w.gpu_versions(node) != {NEW_GPU_VERSION}
    after = slurm.node(node)
    assert (after.state, after.reason, after.flags & {"DRAIN"}) == ("IDLE", None, frozenset())
    assert not [n for n in slurm.nodes if slurm.node(n).ours]  # cordoned without owner: 0
    assert slurm.kill_requests() == 0


# -- E4: a foreign drain --------------------------------------------------------------------


async def test_e4_a_node_drained_by_someone_else_ends_as_they_left_it(
    world: World, slurm: SlurmCluster
) -> None:
    w = world
    free, taken = slurm.nodes[0], slurm.nodes[2]
    slurm.drain(taken, "hw ticket 42")
    before = slurm.node(taken)
    await plan_and_release(w, (free, taken), max_unavailable=2)
    await w.settle(executor(w, scheduler(slurm)))

    item = w.store.item(taken)
    assert item.state is NodeStep.FAILED
    assert item.reason.startswith("left untouched:") and "hw ticket 42" in item.reason
    assert slurm.node(taken) == before  # state, reason and who set it: all theirs
    assert (before.state, before.reason) == ("IDLE", "hw ticket 42")
    assert w.gpu_versions(taken) != {NEW_GPU_VERSION}
    # The rest of the wave went on: drained, flashed, verified and given back by Lockstep.
    assert w.store.item(free).state is NodeStep.DONE
    assert w.gpu_versions(free) == {NEW_GPU_VERSION}
    assert not slurm.node(free).drained
    assert slurm.kill_requests() == 0
