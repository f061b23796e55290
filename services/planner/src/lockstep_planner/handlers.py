"""Thin handlers: record what arrived, move the rollout it concerns, and let it be acked.

Each takes the store's unit of work (``store.PlannerTx``: the transaction and its outbox) and
``now``, so unit tests run it on the in-memory store; ``router.py`` joins it to the consumer
runtime's transaction (``adapters.repository.joined``), whose inbox makes a redelivered event
change nothing. Planning itself, which asks the inventory for the fleet, runs in the worker.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from datetime import datetime, timedelta

from lockstep_common.envelope import Envelope
from lockstep_common.errors import TransientError
from lockstep_common.events.v1 import (
    BundleAttested,
    DeviceActivated,
    DeviceFailed,
    DeviceRolledBack,
    DeviceStaged,
    DeviceVerified,
    GateInconclusive,
    GatePassed,
    GateTripped,
    IntentSubmitted,
    MaintenanceWindowsRequested,
    WaveCompleted,
)
from lockstep_planner.domain.rollout import RolloutState, WaveState, wave_transition
from lockstep_planner.fabric_domains import wave_failures
from lockstep_planner.lifecycle import LIVE, Timing, advance, note, set_state, set_wave, stop
from lockstep_planner.maintenance import on_maintenance_requested
from lockstep_planner.store import BundleRow, IntentRow, PlannerTx, RolloutRow, WaveRow

log = logging.getLogger(__name__)

DeviceEvent = DeviceStaged | DeviceActivated | DeviceVerified | DeviceFailed | DeviceRolledBack
GateEvent = GatePassed | GateTripped | GateInconclusive


class VerdictBeforeCompletion(TransientError):
    """A verdict that needs the wave's soak to have begun arrived first: retry it later."""


def rollout_id_of(intent_id: uuid.UUID) -> str:
    """The rollout id an intent gets: derived from the intent id, so a resent intent names the
    same rollout (and the database's unique key makes it one rollout)."""
    return f"r-{intent_id.hex[:16]}"


async def on_bundle_attested(
    tx: PlannerTx, env: Envelope[BundleAttested], *, now: datetime
) -> None:
    """Remember an attested bundle: only these can be rolled out."""
    data = env.data
    await tx.save_bundle(
        BundleRow(
            stack_hash=data.stack_hash,
            bundle_id=data.bundle_id,
            bundle_version=data.bundle_version,
            bundle_uri=data.bundle_uri,
            components=data.components,
            attested_at=env.occurred_at,
        )
    )


async def on_intent_submitted(
    tx: PlannerTx, env: Envelope[IntentSubmitted], *, now: datetime
) -> None:
    """Record the intent for the worker to plan; an intent id seen before adds nothing (issue
    10: duplicate intents, however often and however concurrent, yield one rollout)."""
    data = env.data
    rollout_id = rollout_id_of(data.intent_id)
    added = await tx.add_intent(IntentRow(data.intent_id, env.event_id, rollout_id, data, now))
    if added:
        await note(
            tx,
            rollout_id,
            data.submitted_by,
            "intent submitted",
            f"intent {data.intent_id}: stack {data.stack_hash}, class {data.change_class}, "
            f"approval {data.approval_ref or '(none)'}{', dry run' if data.dry_run else ''}",
            now,
        )
    else:
        log.info(
            "intent %s already recorded: event %s changes nothing", data.intent_id, env.event_id
        )


async def _live_wave(
    tx: PlannerTx, rollout_id: str, number: int, what: str
) -> tuple[RolloutRow, WaveRow] | None:
    rollout = await tx.rollout(rollout_id)
    if rollout is None:
        log.warning("%s for unknown rollout %s ignored", what, rollout_id)
        return None
    wave = next((w for w in await tx.waves(rollout_id) if w.number == number), None)
    if wave is None:
        log.warning(
            "%s for rollout %s names wave %d, which it does not have", what, rollout_id, number
        )
        return None
    return rollout, wave


async def on_wave_completed(
    tx: PlannerTx, env: Envelope[WaveCompleted], *, timing: Timing, now: datetime
) -> None:
    """The updater finished a wave: its soak starts now."""
    data = env.data
    found = await _live_wave(tx, data.rollout_id, data.wave, "wave.completed")
    if found is None:
        return
    rollout, wave = found
    if wave.state is not WaveState.RELEASED:
        log.info(
            "wave.completed for %s wave %d in state %s: nothing to do",
            data.rollout_id,
            data.wave,
            wave.state,
        )
        return
    soaking = dataclasses.replace(
        wave,
        state=wave_transition(wave.state, WaveState.SOAKING),
        succeeded=len(data.succeeded),
        failed=len(data.failed),
        soak_until=now + timedelta(seconds=wave.soak_s),
    )
    await tx.save_wave(soaking)
    await note(
        tx,
        rollout.rollout_id,
        "updater",
        "wave completed",
        f"wave {wave.number}: {len(data.succeeded)} succeeded, {len(data.failed)} failed; "
        f"soak {wave.soak_s} s",
        now,
    )
    if data.failed:
        await wave_failures(tx, rollout, wave.number, data.failed, now)
    if len(data.failed) > wave.failure_budget and rollout.state in LIVE:
        await stop(
            tx,
            rollout,
            RolloutState.HALTED,
            reason=f"wave {wave.number}: {len(data.failed)} node(s) failed, over its failure "
            f"budget of {wave.failure_budget}: {', '.join(sorted(data.failed)[:10])}",
            by="policy",
            now=now,
            wave_state=WaveState.TRIPPED,
            wave_number=wave.number,
        )
        return
    await advance(tx, rollout, timing, now)


def _evidence(env: Envelope[GateEvent]) -> str:
    data = env.data
    failing = [e for e in data.evidence if not e.passed] or list(data.evidence)
    parts = [
        f"{e.metric} (treatment {e.treatment}, control {e.control}"
        + (f", p={e.p_value:.3g}" if e.p_value is not None else "")
        + (f": {e.detail}" if e.detail else "")
        + ")"
        for e in failing[:5]
    ]
    nodes = (
        f"; offending nodes {', '.join(data.offending_nodes[:10])}" if data.offending_nodes else ""
    )
    return "; ".join(parts) + nodes if parts else f"no evidence given{nodes}"


async def on_gate(
    tx: PlannerTx, env: Envelope[GateEvent], *, timing: Timing, now: datetime
) -> None:
    """A healthgate verdict on a wave: pass (release after the soak), trip (halt at once, with
    the evidence) or inconclusive (pause for a human; missing data is never a pass)."""
    data = env.data
    found = await _live_wave(tx, data.rollout_id, data.wave, f"gate.{data.verdict}")
    if found is None:
        return
    rollout, wave = found
    evidence = _evidence(env)
    if rollout.state not in LIVE or wave.state in (
        WaveState.PASSED,
        WaveState.TRIPPED,
        WaveState.TIMED_OUT,
        WaveState.CANCELLED,
        WaveState.PENDING,
    ):
        await note(
            tx,
            rollout.rollout_id,
            "healthgate",
            f"late gate.{data.verdict}",
            f"wave {wave.number} ({wave.state}), rollout {rollout.state}: {evidence}",
            now,
        )
        return
    if isinstance(data, GateTripped):
        await stop(
            tx,
            rollout,
            RolloutState.HALTED,
            reason=f"gate tripped on wave {wave.number}: {evidence}",
            by="gate",
            now=now,
            wave_state=WaveState.TRIPPED,
            wave_number=wave.number,
        )
        return
    if isinstance(data, GateInconclusive):
        if wave.state is WaveState.RELEASED:
            # The gate and the updater publish on different streams, so a verdict can overtake
            # the wave.completed it follows. Pausing now would leave the wave to start its soak
            # under a paused rollout, where `resume` finds nothing held to accept and the wave
            # waits for a verdict already spent: let the verdict come back after the completion.
            raise VerdictBeforeCompletion(
                "gate.inconclusive before the wave's wave.completed: retried",
                rollout_id=rollout.rollout_id,
                wave=wave.number,
            )
        if wave.state is WaveState.SOAKING:
            await set_wave(tx, wave, WaveState.HELD)
        if rollout.state is RolloutState.RUNNING:
            await set_state(
                tx, rollout, RolloutState.PAUSED, now, f"gate inconclusive on wave {wave.number}"
            )
        await note(
            tx,
            rollout.rollout_id,
            "healthgate",
            "paused",
            f"gate inconclusive on wave {wave.number}: {evidence}; "
            "`lockstep rollout resume` accepts the wave",
            now,
        )
        return
    await tx.save_wave(dataclasses.replace(wave, gate_passed=True))
    await note(
        tx, rollout.rollout_id, "healthgate", "gate passed", f"wave {wave.number}: {evidence}", now
    )
    await advance(tx, rollout, timing, now)


async def on_device_step(tx: PlannerTx, env: Envelope[DeviceEvent], *, now: datetime) -> None:
    """Remember each node's last step, for ``lockstep rollout status``."""
    data = env.data
    step = data.event_type.removeprefix("device.")
    await tx.record_step(data.rollout_id, data.node_id, step, env.occurred_at)


class Handlers:
    """The handlers (``lockstep_common.stores.Handler``) bound to the service's timing; the
    ``now`` each gets is the clock's, read by ``router.py``'s ``joined``."""

    def __init__(self, timing: Timing) -> None:
        self.timing = timing

    async def bundle_attested(
        self, tx: PlannerTx, env: Envelope[BundleAttested], *, now: datetime
    ) -> None:
        await on_bundle_attested(tx, env, now=now)

    async def intent_submitted(
        self, tx: PlannerTx, env: Envelope[IntentSubmitted], *, now: datetime
    ) -> None:
        await on_intent_submitted(tx, env, now=now)

    async def wave_completed(
        self, tx: PlannerTx, env: Envelope[WaveCompleted], *, now: datetime
    ) -> None:
        await on_wave_completed(tx, env, timing=self.timing, now=now)

    async def gate(self, tx: PlannerTx, env: Envelope[GateEvent], *, now: datetime) -> None:
        await on_gate(tx, env, timing=self.timing, now=now)

    async def device_step(
        self, tx: PlannerTx, env: Envelope[DeviceEvent], *, now: datetime
    ) -> None:
        await on_device_step(tx, env, now=now)

    async def maintenance(
        self, tx: PlannerTx, env: Envelope[MaintenanceWindowsRequested], *, now: datetime
    ) -> None:
        await on_maintenance_requested(tx, env, now=now)
