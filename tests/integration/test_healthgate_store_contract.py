"""One set of behavioural assertions, run on both healthgate stores: PostgreSQL (the service's,
samples one row per report, unpivoted on read) and the in-memory one the unit tests use."""

from __future__ import annotations

import dataclasses
import math
import random
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from lockstep_common import db
from lockstep_common.envelope import source_of
from lockstep_common.vocabulary import GateVerdict
from lockstep_gate.decision import (
    Comparison,
    GateDecision,
    HardRule,
    MetricJudgement,
    MetricOutcome,
    RuleFinding,
    RuleHit,
    TripEvidence,
)
from lockstep_healthgate.adapters import partitions
from lockstep_healthgate.adapters.pg_store import PgGateStore
from lockstep_healthgate.domain.readings import Columns
from lockstep_healthgate.domain.signals import signals_of
from lockstep_healthgate.domain.waves import Member, Wave, WaveState
from lockstep_healthgate.store import GateStore, SampleRow, VerdictKind, VerdictRecord
from lockstep_healthgate.testing.memory_store import MemoryGateStore
from lockstep_healthgate.testing.reports import Fault, report

pytestmark = pytest.mark.integration
T0 = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=10)


async def migrated_pool(servers: Any, namespace: str) -> asyncpg.Pool:
    schema = f"{namespace}_healthgate"
    conn = await asyncpg.connect(servers.database_url)
    try:
        gate = db.load_migrations("healthgate", "lockstep_healthgate.migrations")
        await db.migrate(conn, schema, db.messaging_migrations() + gate)
    finally:
        await conn.close()
    return await db.create_pool(
        servers.database_url, schema, min_size=1, max_size=2, application_name="contract"
    )


@pytest.fixture(params=["memory", "postgres"])
async def store(
    request: pytest.FixtureRequest, servers: Any, namespace: str
) -> AsyncIterator[GateStore]:
    if request.param == "memory":
        yield MemoryGateStore()
        return
    pool = await migrated_pool(servers, namespace)
    try:
        yield PgGateStore(pool, source_of("healthgate"))
    finally:
        await pool.close()


def _rows(cols: Columns) -> set[tuple[str, str, float | str, float]]:
    return {
        (n, m, "nan" if math.isnan(v) else v, t)
        for n, m, v, t in zip(cols.node, cols.metric, cols.value, cols.time, strict=True)
    }


async def test_samples_read_back_as_stored_whatever_the_metric_filter(store: GateStore) -> None:
    rng = random.Random(4)
    reports = [
        report("n1", T0, 1, rng, fault=Fault(xids={"79": 2, "13": 1})),
        report("n2", T0 + timedelta(seconds=10), 2, rng),
    ]
    rows = [
        SampleRow(r.observed_at, r.node_id, m, v) for r in reports for m, v in signals_of(r, (79,))
    ]
    rows.append(SampleRow(T0 + timedelta(seconds=20), "n1", "device_failed", 1.0))
    async with store.transaction() as tx:
        await tx.ensure_partitions({partitions.day_of(T0), partitions.day_of(T0 + timedelta(1))})
        assert await tx.add_samples(rows) == len(rows)
    everything = {
        (r.node_id, r.metric, "nan" if math.isnan(r.value) else r.value, r.observed_at.timestamp())
        for r in rows
    }
    late = T0 + timedelta(minutes=1)
    async with store.transaction() as tx:
        assert _rows(await tx.samples(["n1", "n2"], None, T0, late)) == everything
        only = await tx.samples(["n1"], ("heartbeat", "xid_79", "device_failed"), T0, late)
        assert _rows(only) == {
            ("n1", "heartbeat", 1.0, T0.timestamp()),
            ("n1", "xid_79", 2.0, T0.timestamp()),
            ("n1", "device_failed", 1.0, (T0 + timedelta(seconds=20)).timestamp()),
        }
        beats = await tx.samples(["n1", "n2"], ("heartbeat",), T0 + timedelta(seconds=5), late)
        assert _rows(beats) == {("n2", "heartbeat", 2.0, (T0 + timedelta(seconds=10)).timestamp())}
        assert _rows(await tx.samples(["n3"], None, T0, late)) == set()


async def test_skipped_readings_leave_their_rows_out_and_their_names_in(store: GateStore) -> None:
    rng = random.Random(5)
    n1 = report("n1", T0, 1, rng, fault=Fault(xids={"79": 1}))
    n2 = report("n2", T0 + timedelta(seconds=10), 2, rng)
    n1_late = report("n1", T0 + timedelta(seconds=20), 3, rng)
    rows = [
        SampleRow(r.observed_at, r.node_id, m, v)
        for r in (n1, n2, n1_late)
        for m, v in signals_of(r, (79,))
    ]
    async with store.transaction() as tx:
        await tx.ensure_partitions({partitions.day_of(T0), partitions.day_of(T0 + timedelta(1))})
        await tx.add_samples(rows)
    late = T0 + timedelta(minutes=1)
    async with store.transaction() as tx:
        everything = await tx.samples(["n1", "n2"], None, T0, late)
        # n1's first report (with its XID) and n2's fall in the skipped span; the one at its
        # end is kept (the span is half-open, as the judge's soak starts at completion).
        cols = await tx.samples(["n1", "n2"], None, T0, late, skip=(T0, T0 + timedelta(seconds=20)))
        nothing = await tx.samples(
            ["n1", "n2"], None, T0, late, skip=(T0, late + timedelta(hours=1))
        )
    assert _rows(cols) == {r for r in _rows(everything) if r[3] == n1_late.observed_at.timestamp()}
    assert set(cols.nodes) == set(everything.nodes) == {"n1", "n2"}
    assert set(cols.metrics) == set(everything.metrics)
    assert "xid_79" in cols.metrics
    assert nothing.rows == 0
    assert set(nothing.nodes) == {"n1", "n2"}


async def test_waves_open_close_and_keep_one_verdict_claim(store: GateStore) -> None:
    members = (Member("a", "s", True), Member("c", "s", False))
    wave = Wave("r1", 0, WaveState.UPDATING, T0, 60, members)
    async with store.transaction() as tx:
        assert await tx.add_wave(wave)
        assert not await tx.add_wave(wave)
        assert [w.wave for w in await tx.open_waves(["c"])] == [0]
        assert await tx.open_waves(["zzz"]) == []
        assert await tx.claim_due(T0 + timedelta(hours=1), 0, 60) is None  # not soaking
        await tx.set_state("r1", 0, WaveState.SOAKING, completed_at=T0)
        assert [w.rollout_id for w in await tx.soaking_waves()] == ["r1"]
    async with store.transaction() as tx:
        assert await tx.claim_due(T0 + timedelta(seconds=30), 0, 60) is None  # soak not over
        claim = await tx.claim_due(T0 + timedelta(seconds=61), 0, 60)
        assert claim is not None and (claim.token, claim.attempts) == (1, 1)
        assert await tx.claim_due(T0 + timedelta(seconds=62), 0, 60) is None  # leased
        again = await tx.claim_due(T0 + timedelta(seconds=200), 0, 60)  # lease lapsed
        assert again is not None and again.token == 2
        assert not await tx.still_holds(claim) and await tx.still_holds(again)
        got = await tx.wave("r1", 0)
    assert got is not None and got.members == members and got.completed_at == T0


async def test_day_partitions_are_made_ahead_and_dropped_past_the_retention(
    servers: Any, namespace: str
) -> None:
    pool = await migrated_pool(servers, namespace)
    now = datetime(2026, 5, 10, 12, tzinfo=UTC)
    try:
        async with pool.acquire() as conn:
            async with conn.transaction():
                await partitions.ensure(conn, [now.date() - timedelta(days=d) for d in (1, 2, 5)])
            created, dropped = await partitions.maintain(
                conn, now=now, ahead_days=2, retention_s=2 * 86_400
            )
            days = await partitions.existing(conn)
            # A sample lands in its day's partition.
            await conn.execute(
                "INSERT INTO health_samples (observed_at, node_id) VALUES ($1, 'n1')", now
            )
            home = await conn.fetchval("SELECT tableoid::regclass::text FROM health_samples")
    finally:
        await pool.close()
    assert created == [
        "health_samples_p20260510",
        "health_samples_p20260511",
        "health_samples_p20260512",
    ]
    # Whole days that ended more than 2 days ago go: the 5th (ended the 6th) and the 8th (ended
    # the 9th at midnight, 36 h ago) does not.
    assert dropped == ["health_samples_p20260505"]
    assert [d.day for d in days] == [8, 9, 10, 11, 12]
    assert home == "health_samples_p20260510"


def tripped_by_a_hard_rule() -> GateDecision:
    """A hard-rule trip with its hits: what a canary node read, against what, and when."""
    at = (T0 + timedelta(seconds=20)).timestamp()
    hits = (
        RuleHit(node="a", at=at, value=3.0, threshold=0.0, detail="XID 79 at ..."),
        RuleHit(node="b", at=at + 10, value=None, threshold=30.0, detail="no sample at all"),
    )
    finding = RuleFinding(
        rule=HardRule.FATAL_XID,
        stratum="s",
        nodes=("a", "b"),
        canary_nodes=2,
        control_hits=0,
        control_nodes=1,
        environmental=False,
        p_value=None,
        detail="2 of 2 canary node(s)",
        hits=hits,
    )
    return GateDecision(
        verdict=GateVerdict.TRIPPED,
        reason="hard rule fatal_xid broken",
        score=0.0,
        metrics=(),
        rules=(finding,),
        offending_nodes=("a", "b"),
        evaluated_at=at + 10,
        at_trip=TripEvidence(
            window_start=at - 20,
            window_end=at + 10,
            baseline_start=at - 1820,
            baseline_end=at - 20,
            metrics=(
                MetricJudgement(
                    metric="nccl_busbw_gbps",
                    stratum="s",
                    outcome=MetricOutcome.WORSE,
                    critical=True,
                    weight=3.0,
                    comparison=Comparison(
                        canary_nodes=5,
                        control_nodes=5,
                        canary_median=340.25,
                        control_median=361.9,
                        shift=-21.7,
                        low=-24.1,
                        high=-19.3,
                        floor=7.238,
                        p_value=0.0079,
                        canary_deciles=tuple(330.0 + i / 3 for i in range(11)),
                        control_deciles=tuple(355.0 + i / 7 for i in range(11)),
                    ),
                    detail="canary 5 node(s) median 340.2 vs control 5 ...",
                ),
                MetricJudgement(
                    metric="gpu_power_w",
                    stratum="s",
                    outcome=MetricOutcome.NO_DATA,
                    critical=False,
                    weight=1.0,
                    detail="too little data: canary 2 node(s) (need 5), control 5 (need 5)",
                ),
            ),
        ),
    )


async def test_a_verdict_keeps_its_hard_rule_hits(store: GateStore) -> None:
    # Issue 32: the hits (node, reading, threshold, time) are persisted with the verdict and
    # come back as they went in, on both stores, once: a second verdict for the wave is refused.
    # So is the judge's comparison at the trip (``at_trip``): distributions to the last digit,
    # and a metric with too little data as such.
    wave = Wave("r1", 0, WaveState.UPDATING, T0, 60, (Member("a", "s", True),))
    record = VerdictRecord(
        rollout_id="r1",
        wave=0,
        kind=VerdictKind.HARD_RULE,
        decision=tripped_by_a_hard_rule(),
        window_start=T0,
        window_end=T0 + timedelta(seconds=30),
        policy_digest="0" * 64,
        event_id=uuid.uuid4(),
    )
    async with store.transaction() as tx:
        assert await tx.add_wave(wave)
        assert await tx.save_verdict(record)
        again = dataclasses.replace(
            record, decision=record.decision.model_copy(update={"rules": ()})
        )
        assert not await tx.save_verdict(again)
    async with store.transaction() as tx:
        assert await tx.verdicts("r1") == [record]
        assert await tx.verdicts("r1", 1) == []
    (finding,) = record.decision.rules
    assert [(h.node, h.value) for h in finding.hits] == [("a", 3.0), ("b", None)]
    assert record.decision.at_trip is not None
    assert [j.outcome for j in record.decision.at_trip.metrics] == ["worse", "no_data"]
