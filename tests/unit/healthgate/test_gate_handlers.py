"""The healthgate handlers on the in-memory store: samples in, waves tracked, hard rules now."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from lockstep_common.envelope import Envelope, EventData, make_envelope
from lockstep_common.errors import Disposition, InvalidMessage, disposition_for
from lockstep_common.events.v1 import (
    DeviceFailed,
    GateTripped,
    HealthObserved,
    RolloutHalted,
    WaveCompleted,
)
from lockstep_common.vocabulary import Component
from lockstep_gate.policy_files import default_policy
from lockstep_healthgate import handlers
from lockstep_healthgate.domain.waves import WaveState
from lockstep_healthgate.testing.memory_store import MemoryGateStore
from lockstep_healthgate.testing.reports import Fault
from lockstep_healthgate.testing.waves import planned_wave, rounds
from lockstep_healthgate.verdicts import GateConfig

pytestmark = pytest.mark.unit
T0 = datetime(2026, 1, 1, tzinfo=UTC)
CANARY = [f"can-{i}" for i in range(6)]
CONTROL = [f"ctl-{i}" for i in range(12)]
CONFIG = GateConfig(policy=default_policy())


def env(data: EventData, at: datetime) -> Envelope[Any]:
    return make_envelope(data, source="/test", occurred_at=at)


async def ingest(store: MemoryGateStore, reports: Sequence[HealthObserved], now: datetime) -> int:
    async with store.transaction() as tx:
        return await handlers.on_health_observed(
            tx, [env(r, r.observed_at) for r in reports], config=CONFIG, now=now
        )


async def plan(store: MemoryGateStore, rollout: str = "r1", at: datetime = T0) -> None:
    async with store.transaction() as tx:
        await handlers.on_wave_planned(tx, env(planned_wave(rollout, CANARY, CONTROL), at))


async def state_of(store: MemoryGateStore, rollout: str = "r1", wave: int = 0) -> WaveState:
    async with store.transaction() as tx:
        w = await tx.wave(rollout, wave)
    assert w is not None
    return w.state


async def test_reports_become_samples_in_their_day_partition() -> None:
    store = MemoryGateStore()
    reports = rounds(["n1", "n2"], T0, 2)
    stored = await ingest(store, reports, T0 + timedelta(seconds=30))
    assert stored == len(store.tables.samples) == 4 * 14  # 14 signals per full report
    assert store.tables.days == {T0.date()}
    one = {(s.metric, s.value) for s in store.tables.samples if s.node_id == "n1"}
    assert ("heartbeat", 1.0) in one and ("dcgm_diag_passed", 1.0) in one
    assert store.events == []  # no wave: nothing to gate


async def test_reports_older_than_the_retention_are_not_stored() -> None:
    store = MemoryGateStore()
    old = rounds(["n1"], T0, 1)
    assert await ingest(store, old, T0 + timedelta(seconds=CONFIG.retention_s + 1)) == 0


async def test_a_report_observed_after_it_was_sent_is_refused() -> None:
    store = MemoryGateStore()
    (r,) = rounds(["n1"], T0 + timedelta(minutes=5), 1)
    with pytest.raises(InvalidMessage, match="after it was sent"):
        async with store.transaction() as tx:
            await handlers.on_health_observed(tx, [env(r, T0)], config=CONFIG, now=T0)
    assert store.tables.samples == []  # rolled back


async def test_a_wave_is_tracked_from_plan_to_soak_to_close() -> None:
    store = MemoryGateStore()
    await plan(store)
    assert await state_of(store) is WaveState.UPDATING
    done = WaveCompleted(rollout_id="r1", wave=0, succeeded=tuple(CANARY), failed=())
    async with store.transaction() as tx:
        assert await handlers.on_wave_completed(tx, env(done, T0 + timedelta(minutes=5)))
        w = await tx.wave("r1", 0)
    assert w is not None and w.state is WaveState.SOAKING
    assert w.completed_at == T0 + timedelta(minutes=5)
    assert w.due_at == T0 + timedelta(minutes=6)
    assert set(w.canary) == set(CANARY)
    halted = RolloutHalted(rollout_id="r1", wave=0, reason="operator", halted_by="ops")
    async with store.transaction() as tx:
        assert await handlers.on_rollout_ended(tx, env(halted, T0 + timedelta(minutes=7))) == 1
    assert await state_of(store) is WaveState.CLOSED


async def test_a_redelivered_plan_keeps_the_first() -> None:
    store = MemoryGateStore()
    await plan(store)
    async with store.transaction() as tx:
        assert not await handlers.on_wave_planned(
            tx, env(planned_wave("r1", ["other"], []), T0 + timedelta(hours=1))
        )
        w = await tx.wave("r1", 0)
    assert w is not None and w.planned_at == T0 and set(w.canary) == set(CANARY)


async def test_a_completion_before_its_plan_is_retried_and_gated_once_the_plan_is_in() -> None:
    # Two healthgate processes on one consumer: the completion can commit before the plan.
    store = MemoryGateStore()
    done = WaveCompleted(rollout_id="r1", wave=0, succeeded=tuple(CANARY), failed=())
    with pytest.raises(handlers.WaveNotYetKnown, match=r"r1 wave 0 before its wave\.planned"):
        async with store.transaction() as tx:
            await handlers.on_wave_completed(tx, env(done, T0 + timedelta(minutes=5)))
    assert (
        disposition_for(handlers.WaveNotYetKnown("x"), delivery=1, max_deliver=5)
        is Disposition.RETRY
    )
    await plan(store)
    async with store.transaction() as tx:  # the redelivery
        assert await handlers.on_wave_completed(tx, env(done, T0 + timedelta(minutes=5)))
    assert await state_of(store) is WaveState.SOAKING


async def test_a_dcgm_failure_on_a_canary_trips_at_once_and_only_once() -> None:
    store = MemoryGateStore()
    await plan(store)
    start = T0 + timedelta(seconds=10)
    bad = {"can-2": Fault(dcgm_failed=True)}
    await ingest(
        store, rounds(CANARY + CONTROL, start, 3, faults=bad), start + timedelta(seconds=30)
    )
    (tripped,) = store.events
    assert isinstance(tripped, GateTripped)
    assert tripped.rollout_id == "r1" and tripped.wave == 0
    assert tripped.offending_nodes == ("can-2",)
    assert tripped.evidence[0].metric.startswith("dcgm_diag_failed")
    assert await state_of(store) is WaveState.DECIDED
    (verdict,) = store.tables.verdicts.values()
    assert verdict.kind == "hard_rule" and verdict.decision.verdict == "tripped"
    # Kept with the verdict: the node's hit, its reading against the rule's threshold and the
    # time of that reading (the first report), what gate show and the console's timeline show.
    ((rule, hit),) = [(f.rule, h) for f in verdict.decision.rules for h in f.hits]
    assert (rule, hit.node, hit.value, hit.threshold) == ("dcgm_diag_failed", "can-2", 0.0, 1.0)
    assert hit.at == start.timestamp()
    # The same failure again (a redelivery, or the next report): no second verdict.
    later = start + timedelta(seconds=40)
    await ingest(store, rounds(CANARY, later, 1, faults=bad), later + timedelta(seconds=5))
    assert len(store.events) == 1


async def test_a_hard_rule_trip_keeps_the_judges_comparison_as_of_the_trip_as_evidence() -> None:
    # The canary's busbw is 5% down (the judge's floor is 2%, the hard rule's bar 92%) and one
    # canary fails dcgm: the hard rule decides; the judge's comparison at that moment is kept
    # beside it, labelled, for the SRE, and changes nothing of the verdict.
    store = MemoryGateStore()
    await plan(store)
    start = T0 + timedelta(seconds=10)
    faults = dict.fromkeys(CANARY, Fault(busbw_ratio=0.95))
    faults["can-2"] = Fault(busbw_ratio=0.95, dcgm_failed=True)
    now = start + timedelta(seconds=30)
    await ingest(store, rounds(CANARY + CONTROL, start, 4, faults=faults), now)
    (tripped,) = store.events
    (verdict,) = store.tables.verdicts.values()
    d = verdict.decision
    assert d.reason == "hard rule dcgm_diag_failed broken on 1 canary node(s) in gb200/acme/0000"
    assert d.metrics == () and d.offending_nodes == ("can-2",)  # the hard rule's, alone
    assert isinstance(tripped, GateTripped)  # its evidence is the hard rule's, as before
    assert [e.metric for e in tripped.evidence] == ["dcgm_diag_failed[gb200/acme/0000]"]
    at = d.at_trip
    assert at is not None and "did not decide it (the hard rule did)" in at.label
    assert (at.window_start, at.window_end) == (T0.timestamp(), d.evaluated_at)
    assert at.baseline_start is None and at.baseline_end is None  # kept cheap: no baseline
    judged = {j.metric: j for j in at.metrics}
    assert set(judged) == {m.name for m in CONFIG.policy.metrics}
    busbw = judged["nccl_busbw_gbps"]
    assert busbw.outcome == "worse" and busbw.comparison is not None
    c = busbw.comparison
    assert (c.canary_nodes, c.control_nodes) == (6, 12)
    assert len(c.canary_deciles) == len(c.control_deciles) == 11
    assert c.canary_median < 0.96 * c.control_median
    assert judged["sm_clock_mhz"].outcome == "passed"


async def test_evidence_at_a_trip_with_too_few_samples_says_so_rather_than_compares() -> None:
    store = MemoryGateStore()
    await plan(store)
    bad = {"can-2": Fault(dcgm_failed=True)}
    await ingest(store, rounds(CANARY + CONTROL, T0, 1, faults=bad), T0 + timedelta(seconds=5))
    (verdict,) = store.tables.verdicts.values()
    at = verdict.decision.at_trip
    assert at is not None and verdict.decision.verdict == "tripped"
    busbw = next(j for j in at.metrics if j.metric == "nccl_busbw_gbps")
    assert busbw.outcome == "no_data" and busbw.comparison is None
    assert busbw.detail.startswith("too little data")
    assert all(j.outcome in ("no_data", "not_reported") for j in at.metrics)


async def test_a_verdicts_event_id_cannot_be_computed_from_its_rollout_and_wave() -> None:
    ids = []
    for _ in range(2):  # two gates judging the same rollout and wave alike
        store = MemoryGateStore()
        await plan(store)
        start = T0 + timedelta(seconds=10)
        bad = {"can-2": Fault(dcgm_failed=True)}
        await ingest(
            store, rounds(CANARY + CONTROL, start, 3, faults=bad), start + timedelta(seconds=30)
        )
        ((_, tripped),) = store.emitted
        (verdict,) = store.tables.verdicts.values()
        assert tripped.event_id == verdict.event_id  # kept with the verdict, for a republish
        ids.append(tripped.event_id)
    assert ids[0] != ids[1]


async def test_a_fault_on_a_control_node_or_outside_the_wave_trips_nothing() -> None:
    store = MemoryGateStore()
    await plan(store)
    faults = {"ctl-0": Fault(xids={"79": 1}), "elsewhere": Fault(dcgm_failed=True)}
    nodes = [*CANARY, *CONTROL, "elsewhere"]
    await ingest(store, rounds(nodes, T0, 3, faults=faults), T0 + timedelta(seconds=30))
    assert store.events == []
    assert await state_of(store) is WaveState.UPDATING


async def test_a_fatal_xid_on_a_canary_trips_and_names_the_xid() -> None:
    store = MemoryGateStore()
    await plan(store)
    await ingest(
        store,
        rounds(CANARY + CONTROL, T0, 2, faults={"can-0": Fault(xids={"79": 1})}),
        T0 + timedelta(seconds=20),
    )
    (tripped,) = store.events
    assert isinstance(tripped, GateTripped) and tripped.offending_nodes == ("can-0",)
    assert "XID 79" in tripped.evidence[0].detail


async def test_busbw_low_on_the_canary_alone_trips_but_low_everywhere_waits() -> None:
    low = Fault(busbw_ratio=0.8)
    store = MemoryGateStore()
    await plan(store)
    await ingest(
        store,
        rounds(CANARY + CONTROL, T0, 3, faults=dict.fromkeys(CANARY, low)),
        T0 + timedelta(seconds=30),
    )
    (tripped,) = store.events
    assert isinstance(tripped, GateTripped) and set(tripped.offending_nodes) == set(CANARY)

    fleet_wide = MemoryGateStore()
    await plan(fleet_wide)
    everyone = dict.fromkeys(CANARY + CONTROL, low)
    await ingest(
        fleet_wide, rounds(CANARY + CONTROL, T0, 3, faults=everyone), T0 + timedelta(seconds=30)
    )
    assert fleet_wide.events == []  # environmental: the soak's judge asks a human
    assert await state_of(fleet_wide) is WaveState.UPDATING


async def test_a_failed_device_of_the_wave_trips_it() -> None:
    store = MemoryGateStore()
    await plan(store)
    failed = DeviceFailed(
        rollout_id="r1",
        node_id="can-3",
        component=Component.GPU_VBIOS,
        to_version="96.00.1",
        step="verify",
        reason="device unreadable after activation",
    )
    at = T0 + timedelta(minutes=2)
    async with store.transaction() as tx:
        assert await handlers.on_device_failed(tx, env(failed, at), config=CONFIG, now=at) == 1
    (tripped,) = store.events
    assert isinstance(tripped, GateTripped) and tripped.offending_nodes == ("can-3",)
    (sample,) = store.tables.samples
    assert (sample.metric, sample.value) == ("device_failed", 1.0)
    # The same node failing in another rollout is not this wave's evidence.
    other = failed.model_copy(update={"rollout_id": "r2"})
    async with store.transaction() as tx:
        assert await handlers.on_device_failed(tx, env(other, at), config=CONFIG, now=at) == 0


async def test_nan_counters_are_stored_as_missing() -> None:
    store = MemoryGateStore()
    bare = HealthObserved(node_id="n1", site="s", observed_at=T0, heartbeat=1)
    await ingest(store, [bare], T0)
    values = {s.metric: s.value for s in store.tables.samples}
    assert math.isnan(values["ecc_sbe_count"]) and values["heartbeat"] == 1.0
