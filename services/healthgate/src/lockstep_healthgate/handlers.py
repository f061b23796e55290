"""Thin handlers: health samples in, waves tracked, hard rules checked at once.

What each event changes is a function of a ``GateTx``, the gate's configuration, the time and
the event (``on_*``), so it is unit-tested with ``testing.MemoryGateStore``. :class:`Handlers`
binds them to the consumer: each runs inside the consumer's transaction (inbox claim, state,
outbox; the ``HandlerContext`` is the sink), so an event is applied once however often it is
delivered, and a verdict and its ``gate.*`` event commit together, once per wave.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta

import numpy as np

from lockstep_common import subjects
from lockstep_common.clock import SYSTEM_CLOCK, Clock
from lockstep_common.consumer import HandlerContext
from lockstep_common.envelope import Envelope
from lockstep_common.errors import InvalidMessage, TransientError
from lockstep_common.events.v1 import (
    DeviceFailed,
    HealthObserved,
    RolloutCompleted,
    RolloutHalted,
    WaveCompleted,
    WavePlanned,
)
from lockstep_gate.decision import GateDecision
from lockstep_gate.hard_rules import (
    BUSBW,
    BUSBW_EXPECTED,
    DCGM_DIAG,
    DEVICE_FAILED,
    GSP_INIT,
    HEARTBEAT,
    XID_PREFIX,
)
from lockstep_gate.policy import Policy
from lockstep_healthgate.adapters import partitions
from lockstep_healthgate.adapters.pg_store import PgGateTx
from lockstep_healthgate.domain.evidence import gate_event
from lockstep_healthgate.domain.gating import instant_decision
from lockstep_healthgate.domain.readings import Columns
from lockstep_healthgate.domain.signals import may_break_hard_rule, signals_of
from lockstep_healthgate.domain.waves import (
    OPEN,
    Wave,
    WaveState,
    members_of,
    sample_table,
    transition,
)
from lockstep_healthgate.store import GateTx, SampleRow, VerdictKind, VerdictRecord

log = logging.getLogger(__name__)
OBSERVED_AFTER_SENT = timedelta(seconds=1)  # rounding, not clocks: one sender stamps both


class WaveNotYetKnown(TransientError):
    """A wave's completion arrived before its plan: redelivered until the plan is recorded.

    Two healthgate processes pull from one durable consumer, so the later of two events can
    commit first (as can a plan whose first delivery was nak'ed). Dropped, the completion
    would leave the wave ``updating``, never gated, and the planner waiting for its verdict
    forever; a plan that never comes ends in the dead-letter queue, where an operator sees it.
    """


@dataclass(frozen=True, slots=True)
class GateConfig:
    """What the handlers and the worker judge with, besides the store and the time."""

    policy: Policy
    retention_s: float = 3 * 86_400.0
    lookback_s: float = 60.0
    baseline_s: float = 1800.0

    @property
    def policy_digest(self) -> str:
        """SHA-256 of the policy: a stored verdict names the policy it was judged by."""
        return hashlib.sha256(self.policy.model_dump_json().encode()).hexdigest()

    @property
    def rule_metrics(self) -> tuple[str, ...]:
        """The signals the hard rules read at ingest. Not heartbeats: silence sends no sample,
        and nodes of an updating wave reboot; ``watch_heartbeats`` covers the soak."""
        xids = tuple(f"{XID_PREFIX}{c}" for c in self.policy.hard_rules.fatal_xids)
        return (DCGM_DIAG, GSP_INIT, DEVICE_FAILED, BUSBW, BUSBW_EXPECTED, *xids)


async def commit_verdict(
    tx: GateTx,
    wave: Wave,
    decision: GateDecision,
    *,
    kind: str,
    window: tuple[datetime, datetime],
    config: GateConfig,
) -> bool:
    """Persist the wave's verdict and emit its ``gate.*`` event, unless the wave is no longer
    open or already has one; True when this call decided it."""
    current = await tx.wave(wave.rollout_id, wave.wave)  # locked: one decider at a time
    if current is None or current.state not in OPEN:
        return False
    record = VerdictRecord(
        rollout_id=wave.rollout_id,
        wave=wave.wave,
        kind=kind,
        decision=decision,
        window_start=window[0],
        window_end=window[1],
        policy_digest=config.policy_digest,
        # Random, drawn once in the transaction that stores the verdict, never derived from
        # public facts: an id anyone can compute (it was uuid5 of rollout and wave) can be
        # taken first by whoever can write an outbox row, and the genuine verdict would meet
        # it (issue 26). Idempotency does not need a derived id: the verdict row keeps this one
        # (the id stored on the business entity, reliability.md 2.1) and is written in the
        # same transaction as the outbox row (2.4), so a re-run finds the wave decided and
        # emits nothing, and a republish reuses ``record.event_id``.
        event_id=uuid.uuid4(),
    )
    if not await tx.save_verdict(record):
        return False
    await tx.set_state(wave.rollout_id, wave.wave, transition(current.state, WaveState.DECIDED))
    tx.events.emit(
        subjects.gate(decision.verdict, wave.rollout_id),
        gate_event(decision, rollout_id=wave.rollout_id, wave=wave.wave),
        about=wave.rollout_id,
        event_id=record.event_id,
    )
    log.info(
        "gate %s for rollout %s wave %d (%s): %s",
        decision.verdict,
        wave.rollout_id,
        wave.wave,
        kind,
        decision.reason,
    )
    return True


async def check_hard_rules_now(
    tx: GateTx, waves: Sequence[Wave], config: GateConfig, *, now: datetime
) -> int:
    """Run the hard rules on each open wave's recent samples (canary and control); a trip
    is committed at once. Returns how many waves tripped."""
    tripped = 0
    for wave in waves:
        since = max(wave.planned_at, now - timedelta(seconds=config.lookback_s))
        nodes = [m.node_id for m in wave.members]
        cols = await tx.samples(nodes, config.rule_metrics, since, now)
        table = sample_table(wave.members, cols, soak_start=since.timestamp())
        decision = instant_decision(table, config.policy, now=now.timestamp())
        if decision is not None and await commit_verdict(
            tx, wave, decision, kind=VerdictKind.HARD_RULE, window=(since, now), config=config
        ):
            tripped += 1
    return tripped


def with_silent_controls(wave: Wave, cols: Columns, since: datetime) -> Columns:
    """``cols`` plus, for each control node with no sample from ``since`` on, a heartbeat at
    ``since``. A control node that sent nothing is silent too and must count against the
    heartbeat rule, so a telemetry outage that silences canary and control alike is
    environmental, not the rollout's doing. (Silent canary nodes are the rules' roster: "no
    sample at all in the window".)"""
    start = since.timestamp()
    heard = {cols.nodes[i] for i in np.unique(cols.node_code[cols.time >= start]).tolist()}
    mute = [m.node_id for m in wave.members if not m.canary and m.node_id not in heard]
    return cols.plus(mute, HEARTBEAT, 0.0, start)


async def watch_heartbeats(tx: GateTx, config: GateConfig, *, now: datetime) -> int:
    """The heartbeat rule on every soaking wave, at once rather than at the end of the soak
    (seed 003: a heartbeat timeout is a fault). Only after ``wave.completed``: while the wave
    updates, its nodes reboot and silence is expected. Returns how many waves tripped."""
    tripped = 0
    limit = config.policy.hard_rules.heartbeat_interval_s
    limit *= config.policy.hard_rules.heartbeat_missed_intervals
    for wave in await tx.soaking_waves():
        if wave.completed_at is None:
            continue
        # Two silences' worth is enough to see one, and keeps the read small on big waves.
        since = max(wave.completed_at, now - timedelta(seconds=2 * limit))
        if (now - since).total_seconds() <= limit:
            continue  # too soon after the soak began to call anyone silent
        nodes = [m.node_id for m in wave.members]
        cols = await tx.samples(nodes, (HEARTBEAT,), since, now)
        cols = with_silent_controls(wave, cols, since)
        table = sample_table(wave.members, cols, soak_start=since.timestamp())
        decision = instant_decision(
            table, config.policy, now=now.timestamp(), roster=wave.canary_strata
        )
        if decision is not None and await commit_verdict(
            tx, wave, decision, kind=VerdictKind.HARD_RULE, window=(since, now), config=config
        ):
            tripped += 1
    return tripped


async def on_health_observed(
    tx: GateTx, envs: Sequence[Envelope[HealthObserved]], *, config: GateConfig, now: datetime
) -> int:
    """Store a pulled batch of reports as samples (one COPY); when a report could break a hard
    rule on a node of an open wave, check the rules at once. Returns the samples stored."""
    horizon = now - timedelta(seconds=config.retention_s)
    rows: list[SampleRow] = []
    suspects: set[str] = set()
    days: set[date] = set()
    newest = now
    for env in envs:
        report = env.data
        if report.observed_at > env.occurred_at + OBSERVED_AFTER_SENT:
            # The envelope's time is bounded by the runtime's clock-skew check; a report observed
            # after it was sent would carry a forged future into every window.
            raise InvalidMessage(
                f"health report for {report.node_id} says it was observed at "
                f"{report.observed_at.isoformat()}, after it was sent "
                f"({env.occurred_at.isoformat()})"
            )
        if report.observed_at < horizon:
            continue  # older than the retention: its partition is (or will be) gone
        signals = signals_of(report, config.policy.hard_rules.fatal_xids)
        rows.extend(SampleRow(report.observed_at, report.node_id, m, v) for m, v in signals)
        newest = max(newest, report.observed_at)
        days.add(partitions.day_of(report.observed_at))  # per report, not per reading
        if may_break_hard_rule(signals, config.policy):
            suspects.add(report.node_id)
    await tx.ensure_partitions(days)
    stored = await tx.add_samples(rows)
    if suspects:
        waves = [w for w in await tx.open_waves(suspects) if set(w.canary) & suspects]
        await check_hard_rules_now(tx, waves, config, now=newest)
    return stored


async def on_device_failed(
    tx: GateTx, env: Envelope[DeviceFailed], *, config: GateConfig, now: datetime
) -> int:
    """A bricked or unreadable device (issue 11, hard rule): a ``device_failed`` sample, and the
    rules checked at once on the rollout's open waves that update the node."""
    data = env.data
    at = min(env.occurred_at, now)
    await tx.ensure_partitions({partitions.day_of(at)})
    await tx.add_samples([SampleRow(at, data.node_id, DEVICE_FAILED, 1.0)])
    waves = [
        w for w in await tx.open_waves([data.node_id], data.rollout_id) if data.node_id in w.canary
    ]
    return await check_hard_rules_now(tx, waves, config, now=max(now, at))


async def on_wave_planned(tx: GateTx, env: Envelope[WavePlanned]) -> bool:
    """Remember a wave's canary and control per stratum; it starts when it was planned."""
    data = env.data
    wave = Wave(
        rollout_id=data.rollout_id,
        wave=data.wave,
        state=WaveState.UPDATING,
        planned_at=env.occurred_at,
        soak_seconds=data.soak_seconds,
        members=members_of(data),
    )
    return await tx.add_wave(wave)


async def on_wave_completed(tx: GateTx, env: Envelope[WaveCompleted]) -> bool:
    """The updater finished the wave: its soak starts now (``WaveNotYetKnown`` before its
    plan)."""
    data = env.data
    wave = await tx.wave(data.rollout_id, data.wave)
    if wave is None:
        raise WaveNotYetKnown(
            f"wave.completed for rollout {data.rollout_id} wave {data.wave} before its wave.planned"
        )
    if wave.state is not WaveState.UPDATING:
        return False  # decided by a hard rule, or the rollout already ended
    await tx.set_state(
        data.rollout_id,
        data.wave,
        transition(wave.state, WaveState.SOAKING),
        completed_at=env.occurred_at,
    )
    return True


async def on_rollout_ended(tx: GateTx, env: Envelope[RolloutHalted | RolloutCompleted]) -> int:
    """A rollout halted or completed: its undecided waves have nothing left to gate."""
    waves = await tx.open_waves_of(env.data.rollout_id)
    for w in waves:
        await tx.set_state(w.rollout_id, w.wave, transition(w.state, WaveState.CLOSED))
    return len(waves)


class Handlers:
    """The healthgate's handlers, bound to its configuration: each runs its ``on_*`` function
    over the consumer's transaction."""

    def __init__(self, config: GateConfig, clock: Clock = SYSTEM_CLOCK) -> None:
        self.config = config
        self.clock = clock

    async def health_observed(
        self, ctx: HandlerContext, envs: list[Envelope[HealthObserved]]
    ) -> None:
        """A pulled batch of health reports (``on_health_observed``)."""
        await on_health_observed(
            PgGateTx(ctx.conn, ctx), envs, config=self.config, now=self.clock.now()
        )

    async def device_failed(self, ctx: HandlerContext, env: Envelope[DeviceFailed]) -> None:
        """A failed device step (``on_device_failed``)."""
        await on_device_failed(
            PgGateTx(ctx.conn, ctx), env, config=self.config, now=self.clock.now()
        )

    async def wave_planned(self, ctx: HandlerContext, env: Envelope[WavePlanned]) -> None:
        """A wave released (``on_wave_planned``)."""
        await on_wave_planned(PgGateTx(ctx.conn, ctx), env)

    async def wave_completed(self, ctx: HandlerContext, env: Envelope[WaveCompleted]) -> None:
        """A wave finished (``on_wave_completed``)."""
        await on_wave_completed(PgGateTx(ctx.conn, ctx), env)

    async def rollout_ended(
        self, ctx: HandlerContext, env: Envelope[RolloutHalted | RolloutCompleted]
    ) -> None:
        """A rollout halted or completed (``on_rollout_ended``)."""
        await on_rollout_ended(PgGateTx(ctx.conn, ctx), env)
