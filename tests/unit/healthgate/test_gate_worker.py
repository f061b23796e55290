"""The evaluation worker on the in-memory store: a soaked wave judged once, under the fence."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from lockstep_common.clock import ManualClock
from lockstep_common.events.v1 import (
    GateInconclusive,
    GatePassed,
    GateTripped,
    RolloutHalted,
    WaveCompleted,
)
from lockstep_common.service import Resources
from lockstep_gate.policy_files import default_policy
from lockstep_healthgate import handlers
from lockstep_healthgate.domain.waves import WaveState
from lockstep_healthgate.testing.memory_store import MemoryGateStore
from lockstep_healthgate.testing.reports import Fault
from lockstep_healthgate.testing.waves import planned_wave, rounds
from lockstep_healthgate.verdicts import GateConfig
from lockstep_healthgate.worker import GateWorker

from .test_gate_handlers import CANARY, CONTROL, env, ingest

pytestmark = pytest.mark.unit
T0 = datetime(2026, 1, 1, tzinfo=UTC)
SOAK = 120
CONFIG = GateConfig(policy=default_policy(), baseline_s=120)
DONE_AT = T0 + timedelta(minutes=5)
DUE = DONE_AT + timedelta(seconds=SOAK)


def worker(clock: ManualClock, *, max_attempts: int = 3) -> GateWorker:
    return GateWorker(
        CONFIG,
        store=unbuilt,
        poll_s=1,
        grace_s=10,
        lease_s=60,
        max_attempts=max_attempts,
        clock=clock,
    )


def unbuilt(_: Resources) -> MemoryGateStore:
    # These tests hand ``step`` its store; only ``run`` builds one.
    raise AssertionError("run() is not used here")


async def soaked_wave(store: MemoryGateStore, faults: dict[str, Fault] | None = None) -> None:
    """A wave planned at T0, completed at DONE_AT, with reports before it and through the soak."""
    async with store.transaction() as tx:
        await handlers.on_wave_planned(
            tx, env(planned_wave("r1", CANARY, CONTROL, soak_seconds=SOAK), T0)
        )
    nodes = CANARY + CONTROL
    await ingest(store, rounds(nodes, T0 - timedelta(seconds=110), 11, seed=1), T0)
    done = WaveCompleted(rollout_id="r1", wave=0, succeeded=tuple(CANARY), failed=())
    async with store.transaction() as tx:
        await handlers.on_wave_completed(tx, env(done, DONE_AT))
    soak = rounds(nodes, DONE_AT, SOAK // 10 + 1, faults=faults, seed=2, first_heartbeat=40)
    await ingest(store, soak, DUE)


async def test_nothing_is_judged_before_the_soak_and_grace_have_passed() -> None:
    store = MemoryGateStore()
    await soaked_wave(store)
    assert not await worker(ManualClock(DUE + timedelta(seconds=5))).step(store)
    assert store.events == []


async def test_a_healthy_wave_passes_once_with_its_evidence_persisted() -> None:
    store = MemoryGateStore()
    await soaked_wave(store)
    clock = ManualClock(DUE + timedelta(seconds=11))
    assert await worker(clock).step(store)
    (passed,) = store.events
    assert isinstance(passed, GatePassed), passed
    assert passed.rollout_id == "r1" and passed.wave == 0
    (verdict,) = store.tables.verdicts.values()
    assert verdict.kind == "soak"
    assert verdict.decision.evaluated_at == DUE.timestamp()  # as of the soak's end: re-derivable
    assert (verdict.window_start, verdict.window_end) == (DONE_AT, DUE)
    assert {j.metric for j in verdict.decision.metrics} >= {"nccl_busbw_gbps", "sm_clock_mhz"}
    async with store.transaction() as tx:
        w = await tx.wave("r1", 0)
    assert w is not None and w.state is WaveState.DECIDED
    # Nothing left to claim: a second pass, or a restarted worker, emits nothing more.
    clock.advance(3600)
    assert not await worker(clock).step(store)
    assert len(store.events) == 1


async def test_a_slower_canary_trips_on_the_critical_busbw_metric() -> None:
    store = MemoryGateStore()
    # 5% slower, yet above the hard rule's 92% bar: only the judge can see it.
    await soaked_wave(store, faults=dict.fromkeys(CANARY, Fault(busbw_ratio=0.95)))
    assert store.events == []
    assert await worker(ManualClock(DUE + timedelta(seconds=11))).step(store)
    (tripped,) = store.events
    assert isinstance(tripped, GateTripped)
    assert "nccl_busbw_gbps" in tripped.evidence[0].metric
    assert set(tripped.offending_nodes) <= set(CANARY)


async def test_a_claim_taken_over_after_its_lease_lapsed_cannot_commit() -> None:
    store = MemoryGateStore()
    await soaked_wave(store)
    clock = ManualClock(DUE + timedelta(seconds=11))
    async with store.transaction() as tx:
        stale = await tx.claim_due(clock.now(), 10, 60)
        assert stale is not None
        wave = await tx.wave(stale.rollout_id, stale.wave)
    assert wave is not None
    clock.advance(61)  # the first holder stalled past its lease
    assert await worker(clock).step(store)  # the take-over judges and commits
    await worker(clock).judge(store, stale, wave)  # the stale holder wakes up: discarded
    assert len(store.events) == 1


async def test_a_wave_that_keeps_failing_evaluation_is_held_inconclusive() -> None:
    store = MemoryGateStore()
    await soaked_wave(store)
    clock = ManualClock(DUE + timedelta(seconds=11))
    for _ in range(2):  # two claims whose holders died
        async with store.transaction() as tx:
            assert await tx.claim_due(clock.now(), 10, 60) is not None
        clock.advance(61)
    assert await worker(clock, max_attempts=2).step(store)
    (held,) = store.events
    assert isinstance(held, GateInconclusive)
    assert "did not complete in 2 attempts" in store.tables.verdicts["r1", 0].decision.reason


async def test_a_rollout_that_ended_during_the_soak_is_not_judged() -> None:
    store = MemoryGateStore()
    await soaked_wave(store)
    halted = RolloutHalted(rollout_id="r1", wave=0, reason="operator abort", halted_by="ops")
    async with store.transaction() as tx:
        await handlers.on_rollout_ended(tx, env(halted, DONE_AT + timedelta(seconds=30)))
    assert not await worker(ManualClock(DUE + timedelta(seconds=11))).step(store)
    assert store.events == []


async def soaking_wave_with_silence(store: MemoryGateStore, silent: list[str]) -> None:
    """A wave completed at DONE_AT whose ``silent`` nodes stop reporting at once."""
    async with store.transaction() as tx:
        await handlers.on_wave_planned(
            tx, env(planned_wave("r1", CANARY, CONTROL, soak_seconds=SOAK), T0)
        )
    done = WaveCompleted(rollout_id="r1", wave=0, succeeded=tuple(CANARY), failed=())
    async with store.transaction() as tx:
        await handlers.on_wave_completed(tx, env(done, DONE_AT))
    talking = [n for n in CANARY + CONTROL if n not in silent]
    await ingest(store, rounds(talking, DONE_AT, 7, seed=3), DONE_AT + timedelta(seconds=60))


async def test_a_canary_node_silent_during_the_soak_trips_before_the_soak_ends() -> None:
    store = MemoryGateStore()
    await soaking_wave_with_silence(store, silent=["can-1"])
    # 20 s into the soak nobody can be called silent yet (the limit is 3 x 10 s).
    assert await worker(ManualClock(DONE_AT + timedelta(seconds=20))).watch(store) == 0
    assert await worker(ManualClock(DONE_AT + timedelta(seconds=61))).watch(store) == 1
    (tripped,) = store.events
    assert isinstance(tripped, GateTripped) and tripped.offending_nodes == ("can-1",)
    assert "heartbeat_missing" in tripped.evidence[0].metric
    verdict = store.tables.verdicts["r1", 0]
    assert verdict.kind == "hard_rule"
    # The silence's trip keeps the judge's comparison over the soak so far, as evidence: the
    # five canary nodes that reported against the control, the silent one not invented.
    at = verdict.decision.at_trip
    assert at is not None
    assert (at.window_start, at.window_end) == (DONE_AT.timestamp(), verdict.decision.evaluated_at)
    busbw = next(j for j in at.metrics if j.metric == "nccl_busbw_gbps")
    assert busbw.comparison is not None and busbw.outcome == "passed"
    assert (busbw.comparison.canary_nodes, busbw.comparison.control_nodes) == (5, 12)


async def test_silence_on_control_nodes_or_everywhere_does_not_blame_the_rollout() -> None:
    store = MemoryGateStore()
    await soaking_wave_with_silence(store, silent=["ctl-3"])
    assert await worker(ManualClock(DONE_AT + timedelta(seconds=61))).watch(store) == 0
    everyone = MemoryGateStore()
    await soaking_wave_with_silence(everyone, silent=[*CANARY, *CONTROL])
    assert await worker(ManualClock(DONE_AT + timedelta(seconds=61))).watch(everyone) == 0
    assert store.events == everyone.events == []


async def test_a_soak_in_which_no_node_reported_is_held_not_blamed_on_the_rollout() -> None:
    store = MemoryGateStore()
    async with store.transaction() as tx:
        await handlers.on_wave_planned(
            tx, env(planned_wave("r1", CANARY, CONTROL, soak_seconds=SOAK), T0)
        )
    await ingest(store, rounds(CANARY + CONTROL, T0 - timedelta(seconds=110), 11, seed=1), T0)
    done = WaveCompleted(rollout_id="r1", wave=0, succeeded=tuple(CANARY), failed=())
    async with store.transaction() as tx:
        await handlers.on_wave_completed(tx, env(done, DONE_AT))
    # A telemetry outage: nothing from anyone during the soak.
    assert await worker(ManualClock(DUE + timedelta(seconds=11))).step(store)
    (held,) = store.events
    assert isinstance(held, GateInconclusive), held
    decision = store.tables.verdicts["r1", 0].decision
    assert decision.reason.startswith("too little data") and not decision.offending_nodes
