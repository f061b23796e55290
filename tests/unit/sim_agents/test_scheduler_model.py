"""Scheduler emulation: node state table, drains, resumes, foreign drains, jobs, ledger."""

from __future__ import annotations

import itertools

import pytest

from lockstep_sim.scheduler.errors import (
    Conflict,
    DrainedByOther,
    InvalidTransition,
    TooManyRequests,
    UnknownNode,
    UnknownPool,
)
from lockstep_sim.scheduler.model import ALLOWED, NodeState, Scheduler, check_transition
from tests.support import FakeClock

pytestmark = pytest.mark.unit


def make(clock: FakeClock | None = None, **kwargs: object) -> Scheduler:
    pools = {"gpu-a": ["a1", "a2", "a3"], "gpu-b": ["b1"]}
    return Scheduler(pools, clock=clock or FakeClock(1000.0), **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(("current", "target"), list(itertools.product(NodeState, NodeState)))
def test_node_state_table_exhaustive(current: NodeState, target: NodeState) -> None:
    if current is target or target in ALLOWED[current]:
        check_transition(current, target)
    else:
        with pytest.raises(InvalidTransition, match=f"{current.value} to {target.value}"):
            check_transition(current, target)


def test_idle_node_drains_straight_to_drained() -> None:
    s = make()
    assert s.drain("a1", "firmware", "lockstep") is NodeState.DRAINED
    assert s.node("a1").drain is not None


def test_busy_node_goes_draining_then_drained_when_jobs_end() -> None:
    clock = FakeClock(1000.0)
    s = make(clock, time_scale=60.0)
    job = s.submit_job("gpu-a", nodes=1, gpus_per_node=4, duration_s=600.0)
    assert job is not None
    node = job.node_ids[0]
    assert s.node(node).state is NodeState.MIXED
    assert s.drain(node, "firmware", "lockstep") is NodeState.DRAINING
    assert s.submit_job("gpu-a", nodes=3) is None  # a draining node takes no new work
    clock.t += 9.0  # 540 simulated seconds: not yet
    s.tick()
    assert s.node(node).state is NodeState.DRAINING
    clock.t += 1.0
    s.tick()
    assert s.node(node).state is NodeState.DRAINED
    last = s.ledger[-1]
    assert (last.node_id, last.action, last.from_state, last.to_state) == (
        node,
        "job_end",
        NodeState.DRAINING,
        NodeState.DRAINED,
    )


def test_full_node_is_allocated() -> None:
    s = make()
    job = s.submit_job("gpu-b", gpus_per_node=8)
    assert job is not None
    assert s.node("b1").state is NodeState.ALLOCATED
    assert s.submit_job("gpu-b", gpus_per_node=1) is None


def test_resume_by_the_drainer() -> None:
    s = make()
    s.drain("a1", "firmware", "lockstep")
    assert s.resume("a1", "lockstep") is NodeState.IDLE
    assert [e.action for e in s.ledger] == ["drain", "resume"]


def test_resume_refuses_someone_elses_drain_naming_them() -> None:
    s = make()
    s.drain("a1", "PSU swap", "dc-ops")
    with pytest.raises(DrainedByOther) as err:
        s.resume("a1", "lockstep")
    message = str(err.value)
    assert "'dc-ops'" in message and "PSU swap" in message and "'lockstep'" in message
    assert s.node("a1").state is NodeState.DRAINED


def test_forced_resume_overrides_and_is_recorded() -> None:
    s = make()
    s.drain("a1", "PSU swap", "dc-ops")
    assert s.resume("a1", "lockstep", force=True) is NodeState.IDLE
    assert "forced over drain by 'dc-ops'" in s.ledger[-1].detail


def test_drain_of_someone_elses_drain_is_refused() -> None:
    s = make()
    s.drain("a1", "PSU swap", "dc-ops")
    with pytest.raises(DrainedByOther, match="dc-ops"):
        s.drain("a1", "firmware", "lockstep")
    assert s.drain("a1", "PSU swap", "dc-ops") is NodeState.DRAINED  # idempotent for owner


def test_resume_of_undrained_node_is_a_conflict() -> None:
    with pytest.raises(Conflict, match="not drained"):
        make().resume("a1", "lockstep")


def test_unknown_node_and_pool() -> None:
    s = make()
    with pytest.raises(UnknownNode, match="zz"):
        s.drain("zz", "x", "y")
    with pytest.raises(UnknownPool, match="gpu-a, gpu-b"):
        s.submit_job("nope")


def test_foreign_drain_knob_blocks_lockstep_resume() -> None:
    s = make(seed=5)
    node = s.inject_foreign_drain(reason="maintenance", by="ops")
    assert s.node(node).drain is not None
    with pytest.raises(DrainedByOther, match="maintenance"):
        s.resume(node, "lockstep")
    assert make(seed=5).inject_foreign_drain() == node  # deterministic under the seed


def test_throttled_drains_are_refused_with_429_and_change_nothing() -> None:
    s = make()
    s.throttle_drains(2)
    for _ in range(2):
        with pytest.raises(TooManyRequests, match="429") as refused:
            s.drain("a1", "firmware", "lockstep")
        assert refused.value.status == 429
    assert s.node("a1").drain is None and s.ledger == []
    assert s.drain("a1", "firmware", "lockstep") is NodeState.DRAINED  # the budget is spent


def test_throttle_of_one_node_leaves_the_others_alone() -> None:
    s = make()
    s.throttle_drains(1, "a1")
    with pytest.raises(TooManyRequests):
        s.drain("a1", "firmware", "lockstep")
    assert s.drain("a2", "firmware", "lockstep") is NodeState.DRAINED
    s.throttle_drains(5, "a1")
    s.throttle_drains(0, "a1")  # lifted
    assert s.drain("a1", "firmware", "lockstep") is NodeState.DRAINED
    with pytest.raises(UnknownNode):
        s.throttle_drains(1, "zz")


def test_slowed_drains_hand_out_their_delays_once_each() -> None:
    s = make()
    s.slow_drains(2.5, count=2)
    assert [s.next_drain_delay() for _ in range(3)] == [2.5, 2.5, 0.0]
    s.slow_drains(1.0)
    s.slow_drains(0.0, 0)  # lifted
    assert s.next_drain_delay() == 0.0


def test_foreign_drain_when_all_drained() -> None:
    s = make()
    for n in list(s.nodes):
        s.drain(n, "x", "lockstep")
    with pytest.raises(Conflict, match="already drained"):
        s.inject_foreign_drain()


def test_down_kills_jobs_and_up_keeps_drain() -> None:
    s = make()
    s.submit_job("gpu-b")
    s.drain("b1", "firmware", "lockstep")
    s.mark_down("b1", "heartbeat lost")
    assert s.node("b1").state is NodeState.DOWN
    assert not s.jobs
    s.mark_up("b1")
    assert s.node("b1").state is NodeState.DRAINED


def test_arrivals_are_deterministic_and_end() -> None:
    def run() -> list[tuple[str, tuple[str, ...]]]:
        clock = FakeClock(1000.0)
        s = make(clock, seed=2, arrival_rate_per_s=0.5, job_duration_s=(5.0, 10.0))
        for _ in range(10):
            clock.t += 1.0
            s.tick()
        started = [(j.job_id, j.node_ids) for j in s.jobs.values()]
        s.arrival_rate_per_s = 0.0
        clock.t += 100.0
        s.tick()
        assert not any(n.jobs for n in s.nodes.values())
        return started

    first = run()
    assert first
    assert first == run()


def test_node_in_two_pools_is_rejected() -> None:
    with pytest.raises(ValueError, match="two pools"):
        Scheduler({"p": ["x"], "q": ["x"]})
