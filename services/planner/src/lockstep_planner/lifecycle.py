"""Moving a rollout along: release, soak, pass, halt, pause, resume, abort, complete.

Every change goes through ``domain.rollout.transition`` / ``wave_transition`` on rows read under
their lock, lands in the audit trail, and emits its event in the same transaction (so a
rollout's state and what the fleet was told can never disagree). Gate semantics are Argo
Rollouts' three-valued analysis (peers.md section 8) as issue 10, deliverable 7 words them:
``gate.passed`` plus the soak releases the next wave, ``gate.tripped`` halts at once,
``gate.inconclusive`` pauses for a human, a wave without progress by its deadline halts.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from lockstep_common import canonical, subjects
from lockstep_common.envelope import Envelope, EventData
from lockstep_common.events.v1 import (
    PinChanged,
    RolloutCompleted,
    RolloutHalted,
    ScopeSelector,
    WavePlanned,
)
from lockstep_common.vocabulary import Component, clip_text
from lockstep_planner.domain.intake import stack_of
from lockstep_planner.domain.rollout import (
    WAVE_ALLOWED,
    RolloutState,
    WaveState,
    transition,
    wave_transition,
)
from lockstep_planner.fabric_domains import after_wave, before_release, claim_all, let_go
from lockstep_planner.store import AuditEntry, PlannerTx, RolloutRow, WaveRow

log = logging.getLogger(__name__)

PLANNER = "planner"
LIVE = frozenset({RolloutState.RUNNING, RolloutState.PAUSED})
"""States in which gate verdicts and wave completions still move waves."""


@dataclass(frozen=True, slots=True)
class Timing:
    """How long a released wave may go without finishing before it halts the rollout."""

    deadline_factor: float = 3.0
    """Times the plan's estimate of the wave's work."""
    deadline_min_s: float = 3600.0
    redrive_s: float = 300.0
    """A released wave none of whose nodes moved for this long is released again (``redrive``)."""


async def note(
    tx: PlannerTx, rollout_id: str, actor: str, action: str, detail: str, now: datetime
) -> None:
    """Append one line to the audit trail."""
    await tx.audit(AuditEntry(rollout_id, now, actor, action, clip_text(detail)))


async def set_state(
    tx: PlannerTx, rollout: RolloutRow, state: RolloutState, now: datetime, reason: str = ""
) -> RolloutRow:
    changed = dataclasses.replace(
        rollout,
        state=transition(rollout.state, state),
        updated_at=now,
        reason=reason or rollout.reason,
    )
    await tx.save_rollout(changed)
    return changed


async def set_wave(tx: PlannerTx, wave: WaveRow, state: WaveState, **fields: object) -> WaveRow:
    changed = dataclasses.replace(wave, state=wave_transition(wave.state, state), **fields)  # type: ignore[arg-type]
    await tx.save_wave(changed)
    return changed


async def release(
    tx: PlannerTx, rollout: RolloutRow, wave: WaveRow, timing: Timing, now: datetime
) -> None:
    """Hand one wave to the updater (``wave.planned``), with a deadline for its work."""
    allowed = max(timing.deadline_min_s, timing.deadline_factor * wave.planned_s)
    env = _emit_release(tx, rollout, wave)
    await set_wave(
        tx,
        wave,
        WaveState.RELEASED,
        released_at=now,
        deadline=now + timedelta(seconds=allowed),
        release_event=env.event_id,
    )
    await note(
        tx,
        rollout.rollout_id,
        PLANNER,
        "wave released",
        f"wave {wave.number}: {len(wave.node_ids)} node(s), components "
        f"{', '.join(wave.components) or '(none)'}, deadline in {allowed:.0f} s",
        now,
    )


async def redrive(
    tx: PlannerTx, rollout: RolloutRow, wave: WaveRow, timing: Timing, now: datetime
) -> None:
    """Publish a released wave's ``wave.planned`` again: none of its nodes moved for
    ``timing.redrive_s``, so the release may never have reached the updater (a message the
    broker acknowledged and then lost: test plan A4, Jepsen's lazy fsync, reliability.md 1.6).
    The planner is level-triggered here as metal-toolbox's orchestrator is ("publishes them
    with a time interval until they are finalized"). The copy is the same event (same id),
    which every consumer's inbox dedupes on: one that took the release drops it, so a wave
    that is merely slow loses nothing by it; its deadline still bounds it."""
    env_id = wave.release_event
    attempt = f"redrive-{wave.redrives + 1}"
    if env_id is None or not await tx.republish(env_id, attempt):
        # Released before release ids were kept, or the outbox row is past its retention:
        # the same release again, under the id it had when there was one.
        env_id = _emit_release(tx, rollout, wave, event_id=env_id).event_id
    await tx.save_wave(
        dataclasses.replace(wave, release_event=env_id, redriven_at=now, redrives=wave.redrives + 1)
    )
    await note(
        tx,
        rollout.rollout_id,
        PLANNER,
        "wave re-driven",
        f"wave {wave.number}: no node of it moved for {timing.redrive_s:.0f} s; its release "
        f"(event {env_id}) published again ({attempt})",
        now,
    )


def _emit_release(
    tx: PlannerTx, rollout: RolloutRow, wave: WaveRow, *, event_id: uuid.UUID | None = None
) -> Envelope[EventData]:
    """The ``wave.planned`` that hands ``wave`` to the updater."""
    return tx.events.emit(
        subjects.wave_planned(rollout.rollout_id),
        WavePlanned(
            rollout_id=rollout.rollout_id,
            wave=wave.number,
            node_ids=wave.node_ids,
            components=tuple(Component(c) for c in wave.components),
            max_unavailable=wave.max_unavailable,
            failure_budget=wave.failure_budget,
            soak_seconds=wave.soak_s,
            strata=wave.strata,
            # From the stored plan the approver signed (its hash covers it).
            reflash=tuple(Component(c) for c in rollout.plan.get("reflash", ())),
        ),
        about=rollout.rollout_id,
        correlation_id=str(rollout.intent_id),
        event_id=event_id,
    )


async def advance(tx: PlannerTx, rollout: RolloutRow, timing: Timing, now: datetime) -> RolloutRow:
    """Do whatever is due for a running rollout: pass a soaked wave whose gate passed, release
    the next pending wave, or complete it after the last."""
    if rollout.state is not RolloutState.RUNNING:
        return rollout
    waves = await tx.waves(rollout.rollout_id)
    for wave in waves:
        if wave.state is WaveState.PASSED:
            continue
        if wave.state is WaveState.PENDING:
            occupied = await before_release(tx, rollout, wave.node_ids, now)
            if occupied:
                return await _wait_for(tx, rollout, wave, occupied, now)
            if rollout.reason.startswith(_waits(wave)):
                rollout = dataclasses.replace(rollout, reason="", updated_at=now)
                await tx.save_rollout(rollout)
            await release(tx, rollout, wave, timing, now)
            return rollout
        if (
            wave.state in (WaveState.SOAKING, WaveState.HELD)
            and wave.gate_passed
            and wave.soak_until is not None
            and wave.soak_until <= now
        ):
            await set_wave(tx, wave, WaveState.PASSED)
            await note(
                tx,
                rollout.rollout_id,
                PLANNER,
                "wave passed",
                f"wave {wave.number}: gate passed and soak over",
                now,
            )
            await after_wave(tx, rollout, wave.node_ids, now)
            continue
        return rollout  # the current wave is still working, soaking or waiting for its gate
    return await complete(tx, rollout, waves, now)


def _waits(wave: WaveRow) -> str:
    return f"wave {wave.number} waits:"


async def _wait_for(
    tx: PlannerTx, rollout: RolloutRow, wave: WaveRow, occupied: Sequence[str], now: datetime
) -> RolloutRow:
    """A wave whose fabric domain a job occupies is not released (seed 002: the update waits
    until the domain is next unoccupied); the worker's fabric sync releases it once the
    scheduler shows the domain free. Said once in the audit trail and the rollout's reason."""
    why = (
        f"{_waits(wave)} fabric domain(s) {', '.join(occupied)} OCCUPIED by a job; released "
        "once AVAILABLE"
    )
    if rollout.reason == why:
        return rollout
    waiting = dataclasses.replace(rollout, reason=why, updated_at=now)
    await tx.save_rollout(waiting)
    await note(tx, rollout.rollout_id, PLANNER, "wave deferred", why, now)
    return waiting


async def start(
    tx: PlannerTx, rollout: RolloutRow, timing: Timing, now: datetime, approvals: str
) -> RolloutRow:
    """Approvals are in (or none are needed): pin the fabric domains the rollout moves (a
    conflict aborts it before any work), then release the canary."""
    conflicts = await claim_all(tx, rollout, PLANNER, now)
    if conflicts:
        # PLANNED may only go to RUNNING or ABORTED: nothing ran, so the plan is closed.
        return await stop(
            tx,
            rollout,
            RolloutState.ABORTED,
            reason="fabric domain conflict: " + "; ".join(conflicts),
            by="policy",
            now=now,
        )
    running = await set_state(tx, rollout, RolloutState.RUNNING, now)
    await note(tx, rollout.rollout_id, PLANNER, "started", f"approvals: {approvals}", now)
    return await advance(tx, running, timing, now)


async def complete(
    tx: PlannerTx, rollout: RolloutRow, waves: Sequence[WaveRow], now: datetime
) -> RolloutRow:
    """Every wave passed: the rollout is done and the pin follows it (issue 10, deliverable 8:
    the planner, not the CLI, publishes ``pin.changed`` for rollouts)."""
    done = await set_state(tx, rollout, RolloutState.COMPLETED, now)
    # Every passed wave was reported complete by the updater (soaking needs wave.completed).
    updated = sum(w.succeeded for w in waves)
    failed = sum(w.failed for w in waves)
    tx.events.emit(
        subjects.rollout_completed(rollout.rollout_id),
        RolloutCompleted(rollout_id=rollout.rollout_id, nodes_updated=updated, nodes_failed=failed),
        about=rollout.rollout_id,
        correlation_id=str(rollout.intent_id),
    )
    bundle = await tx.bundle(rollout.stack_hash)
    sites = sorted(set(rollout.plan.get("sites", ())))
    if bundle is None or not sites:
        log.warning(
            "rollout %s completed without a pin: bundle or sites unknown", rollout.rollout_id
        )
    else:
        stack = {
            p: {Component(c): v for c, v in comps.items()}
            for p, comps in stack_of(bundle.components).items()
        }
        scope = ScopeSelector.model_validate(rollout.scope, strict=False)
        for site in sites:
            # One pin per site, scoped to it, as `lockstep fleet pin` does: the inventory keeps
            # pins per (site, scope). Excluded and failed nodes in scope then show as drift.
            tx.events.emit(
                subjects.pin_changed(site),
                PinChanged(
                    site=site,
                    scope=scope.model_copy(update={"sites": (site,)}),
                    stack_hash=canonical.stack_hash(stack),
                    stack=stack,
                    rollout_id=rollout.rollout_id,
                ),
                about=rollout.rollout_id,
                correlation_id=str(rollout.intent_id),
            )
    await note(
        tx,
        rollout.rollout_id,
        PLANNER,
        "completed",
        f"every wave passed; {updated} node(s) updated, {failed} failed; pin moved for "
        f"site(s) {', '.join(sites) or '(none)'}",
        now,
    )
    return done


async def stop(
    tx: PlannerTx,
    rollout: RolloutRow,
    state: RolloutState,
    *,
    reason: str,
    by: str,
    now: datetime,
    wave_state: WaveState = WaveState.CANCELLED,
    wave_number: int | None = None,
) -> RolloutRow:
    """Halt or abort: no new work (pending waves cancelled), ``rollout.halted`` with the reason.

    ``wave_number``'s wave takes ``wave_state`` (tripped, timed out); in-flight device steps of
    a released wave finish (issue 10: "new work stops; in-flight device steps finish")."""
    stopped = await set_state(tx, rollout, state, now, reason)
    await let_go(tx, rollout, reason, now)
    current = 0
    for wave in await tx.waves(rollout.rollout_id):
        if wave.number == wave_number and wave_state in WAVE_ALLOWED[wave.state]:
            await set_wave(tx, wave, wave_state)
            current = wave.number
        elif wave.state in (
            WaveState.PENDING,
            WaveState.RELEASED,
            WaveState.SOAKING,
            WaveState.HELD,
        ):
            if wave.state is not WaveState.PENDING:
                current = wave.number
            await set_wave(tx, wave, WaveState.CANCELLED)
    if wave_number is not None:
        current = wave_number
    tx.events.emit(
        subjects.rollout_halted(rollout.rollout_id),
        RolloutHalted(
            rollout_id=rollout.rollout_id, wave=current, reason=clip_text(reason), halted_by=by
        ),
        about=rollout.rollout_id,
        correlation_id=str(rollout.intent_id),
    )
    await note(tx, rollout.rollout_id, by, state.value, reason, now)
    return stopped
