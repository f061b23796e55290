"""Scheduler emulation: a cluster job occupying chosen nodes across pools (a fabric domain),
ended on demand."""

from __future__ import annotations

import pytest

from lockstep_sim.scheduler.errors import Conflict
from lockstep_sim.scheduler.model import NodeState, Scheduler
from tests.support import FakeClock

pytestmark = pytest.mark.unit


def make() -> Scheduler:
    return Scheduler({"gpu-a": ["a1", "a2"], "gpu-b": ["b1"]}, clock=FakeClock(1000.0))


def test_a_cluster_occupies_nodes_of_two_pools_and_a_drain_waits_for_it() -> None:
    s = make()
    job = s.occupy(["a2", "b1"], duration_s=1e9, name="llm-7")
    assert job.job_id == "llm-7" and job.node_ids == ("a2", "b1")
    assert [s.node(n).state for n in ("a1", "a2", "b1")] == [
        NodeState.IDLE,
        NodeState.ALLOCATED,
        NodeState.ALLOCATED,
    ]
    assert s.drain("b1", "firmware", "lockstep") is NodeState.DRAINING
    s.finish_job("llm-7")
    assert s.node("b1").state is NodeState.DRAINED and s.node("a2").state is NodeState.IDLE
    assert [(e.node_id, e.action) for e in s.ledger if e.detail == "llm-7"] == [
        ("a2", "job_start"),
        ("b1", "job_start"),
        ("a2", "job_end"),
        ("b1", "job_end"),
    ]


def test_occupying_a_busy_node_or_ending_an_unknown_job_is_a_conflict() -> None:
    s = make()
    s.drain("a1", "maintenance", "ops")
    with pytest.raises(Conflict, match="a1"):
        s.occupy(["a1", "a2"], duration_s=60)
    assert s.node("a2").state is NodeState.IDLE  # nothing half-done
    with pytest.raises(Conflict, match="no running job 'x'"):
        s.finish_job("x")
