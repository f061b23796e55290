"""Thin handlers: health samples in, waves tracked, hard rules checked at once.

What each event changes is a function of a ``GateTx``, the gate's configuration, the time and
the event (``on_*``), so it is unit-tested with ``testing.MemoryGateStore``. :class:`Handlers`
binds them to the configuration; ``router.py`` runs each inside the consumer's transaction
(inbox claim, state, outbox: ``pg_store.joined``), so an event is applied once however often it
is delivered, and a verdict and its ``gate.*`` event commit together, once per wave
(``verdicts``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import date, datetime, timedelta

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
from lockstep_gate.hard_rules import DEVICE_FAILED
from lockstep_healthgate.adapters import partitions
from lockstep_healthgate.domain.signals import may_break_hard_rule, signals_of
from lockstep_healthgate.domain.waves import Wave, WaveState, members_of, transition
from lockstep_healthgate.store import GateTx, SampleRow
from lockstep_healthgate.verdicts import GateConfig, check_hard_rules_now

log = logging.getLogger(__name__)
OBSERVED_AFTER_SENT = timedelta(seconds=1)  # rounding, not clocks: one sender stamps both


class WaveNotYetKnown(TransientError):
    """A wave's completion arrived before its plan: redelivered until the plan is recorded.

    Two healthgate processes pull from one durable consumer, so the later of two events can
    commit first (as can a plan whose first delivery was nak'ed). Dropped, the completion
    would leave the wave ``updating``, never gated, and the planner waiting for its verdict
    forever; a plan that never comes ends in the dead-letter queue, where an operator sees it.
    """


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
    """The healthgate's handlers (``lockstep_common.stores.Handler``), bound to its
    configuration: each runs its ``on_*`` function on the unit of work ``router.py`` joins to
    the consumer's transaction."""

    def __init__(self, config: GateConfig) -> None:
        self.config = config

    async def health_observed(
        self, tx: GateTx, envs: Sequence[Envelope[HealthObserved]], *, now: datetime
    ) -> None:
        """A pulled batch of health reports (``on_health_observed``)."""
        await on_health_observed(tx, envs, config=self.config, now=now)

    async def device_failed(
        self, tx: GateTx, env: Envelope[DeviceFailed], *, now: datetime
    ) -> None:
        """A failed device step (``on_device_failed``)."""
        await on_device_failed(tx, env, config=self.config, now=now)

    async def wave_planned(self, tx: GateTx, env: Envelope[WavePlanned], *, now: datetime) -> None:
        """A wave released (``on_wave_planned``: it starts when it was planned)."""
        await on_wave_planned(tx, env)

    async def wave_completed(
        self, tx: GateTx, env: Envelope[WaveCompleted], *, now: datetime
    ) -> None:
        """A wave finished (``on_wave_completed``: its soak starts when it completed)."""
        await on_wave_completed(tx, env)

    async def rollout_ended(
        self, tx: GateTx, env: Envelope[RolloutHalted | RolloutCompleted], *, now: datetime
    ) -> None:
        """A rollout halted or completed (``on_rollout_ended``)."""
        await on_rollout_ended(tx, env)
