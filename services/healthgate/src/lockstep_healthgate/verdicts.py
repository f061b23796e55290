"""How a wave's verdict is reached and committed, shared by the handlers (a hard rule, at once)
and the evaluation worker (the judge, after the soak): the gate's configuration, the one way a
verdict is stored with its ``gate.*`` event, and the hard rules run now on open waves.

The handlers and the worker both stand above this module and never import each other.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np

from lockstep_common import subjects
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
from lockstep_healthgate.domain.evidence import gate_event
from lockstep_healthgate.domain.gating import instant_decision, with_trip_evidence
from lockstep_healthgate.domain.readings import Columns
from lockstep_healthgate.domain.waves import OPEN, Wave, WaveState, sample_table, transition
from lockstep_healthgate.store import GateTx, VerdictKind, VerdictRecord

log = logging.getLogger(__name__)


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


async def with_evidence_at_trip(
    tx: GateTx, wave: Wave, decision: GateDecision, config: GateConfig, *, now: datetime
) -> GateDecision:
    """A hard rule's trip of ``wave`` with the judge's comparison of its samples so far: the
    soak so far once the wave completed, else the update so far (since it was planned), every
    metric. Read in the trip's own transaction, once per trip (never per sample), the judge
    in a thread as the worker's. Not the baseline: at the design load it is ~30 times the
    rows of a trip's window (``baseline_s`` against seconds), and the trip waits for this; so
    the environmental check at the trip is against the policy's expected values only."""
    start = wave.planned_at if wave.completed_at is None else wave.completed_at
    cols = await tx.samples([m.node_id for m in wave.members], None, start, now)

    def judged() -> GateDecision:
        table = sample_table(wave.members, cols, soak_start=start.timestamp())
        return with_trip_evidence(
            decision, table, config.policy, window_start=start.timestamp(), baseline=None
        )

    return await asyncio.to_thread(judged)


async def commit_trip(
    tx: GateTx,
    wave: Wave,
    decision: GateDecision,
    *,
    window: tuple[datetime, datetime],
    config: GateConfig,
) -> bool:
    """Commit a hard rule's trip with its evidence at trip time (``with_evidence_at_trip``),
    unless the wave is no longer open: the judge's comparison runs only for a trip that will
    be recorded."""
    current = await tx.wave(wave.rollout_id, wave.wave)  # locked: one decider at a time
    if current is None or current.state not in OPEN:
        return False
    decision = await with_evidence_at_trip(tx, current, decision, config, now=window[1])
    return await commit_verdict(
        tx, wave, decision, kind=VerdictKind.HARD_RULE, window=window, config=config
    )


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
        if decision is not None and await commit_trip(
            tx, wave, decision, window=(since, now), config=config
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
        if decision is not None and await commit_trip(
            tx, wave, decision, window=(since, now), config=config
        ):
            tripped += 1
    return tripped
