"""Thin handlers: record what arrived; the executor does the long, fenced device work.

Each is a ``lockstep_common.stores.Handler``: ``(tx, env, *, now)`` on the store's unit of work
(``store.UpdaterTx``) rather than the consumer runtime's context, so unit tests run it on the
in-memory store; ``router.py`` joins it to the runtime's transaction
(``adapters.repository.joined``).
"""

from __future__ import annotations

import logging
from datetime import datetime

from lockstep_common import subjects
from lockstep_common.envelope import Envelope
from lockstep_common.errors import TransientError
from lockstep_common.events.v1 import (
    BundleAttested,
    DriftDetected,
    DriftResolved,
    GateTripped,
    MaintenanceWindowsChanged,
    RolloutHalted,
    RolloutPlanned,
    WavePlanned,
)
from lockstep_common.vocabulary import clip_text
from lockstep_updater.domain.guard import outside_plan, outside_wave
from lockstep_updater.domain.progress import RemedyProgress, document
from lockstep_updater.domain.remedy import Intake, RemedyPolicy, intake, remedy_id
from lockstep_updater.store import UpdaterTx

log = logging.getLogger(__name__)
HALTED_BY = "updater"


class PlanNotYetKnown(TransientError):
    """A wave arrived before its rollout's plan: redelivered until the plan is recorded."""


class Handlers:
    """The updater's handlers, bound to the GSP runbook's policy (``gsp_remedy``: what a
    drift that includes a GSP / driver mismatch starts, ``domain.remedy.RemedyPolicy``)."""

    def __init__(self, gsp_remedy: RemedyPolicy) -> None:
        self._gsp_remedy = gsp_remedy

    async def rollout_planned(
        self, tx: UpdaterTx, env: Envelope[RolloutPlanned], *, now: datetime
    ) -> None:
        """Remember which nodes the approved plan contains, and the stack it moves them to."""
        data = env.data
        if data.dry_run:
            return  # nothing of a dry run is ever executed
        nodes = frozenset(n for wave in data.waves for n in wave.node_ids)
        waves = {n: wave.number for wave in data.waves for n in wave.node_ids}
        await tx.record_plan(data.rollout_id, data.stack_hash, nodes, waves)

    async def bundle_attested(
        self, tx: UpdaterTx, env: Envelope[BundleAttested], *, now: datetime
    ) -> None:
        """Remember the attested images: what a rollout to this stack pushes."""
        data = env.data
        await tx.record_bundle(data.stack_hash, data.bundle_uri, data.components)

    async def wave_planned(
        self, tx: UpdaterTx, env: Envelope[WavePlanned], *, now: datetime
    ) -> None:
        """Record the wave and a work item per node, once; refuse the whole wave, touching nothing
        and halting the rollout, when it names a node outside the approved plan or one the plan put
        in another wave (a corrupted plan, reliability.md F3)."""
        data = env.data
        plan = await tx.plan_nodes(data.rollout_id)
        if plan is None:
            raise PlanNotYetKnown(
                f"wave {data.wave} of {data.rollout_id} before its rollout.planned"
            )
        strangers = outside_plan(data.node_ids, plan)
        misplaced = outside_wave(data.wave, data.node_ids, await tx.plan_waves(data.rollout_id))
        if strangers or misplaced:
            where = (
                "outside the approved plan"
                if strangers
                else "the approved plan put in another wave"
            )
            bad = strangers or misplaced
            shown = ", ".join(bad[:5]) + (" ..." if len(bad) > 5 else "")
            reason = (
                f"wave {data.wave} names {len(bad)} node(s) {where} ({shown}): "
                "refused, nothing touched"
            )
            log.error("%s: %s", data.rollout_id, reason)
            await tx.halt(data.rollout_id, reason)
            tx.events.emit(
                subjects.rollout_halted(data.rollout_id),
                RolloutHalted(
                    rollout_id=data.rollout_id,
                    wave=data.wave,
                    reason=clip_text(reason),
                    halted_by=HALTED_BY,
                ),
                correlation_id=env.correlation_id,
            )
            return
        await tx.record_wave(data, env.correlation_id or str(env.event_id))

    async def rollout_halted(
        self, tx: UpdaterTx, env: Envelope[RolloutHalted], *, now: datetime
    ) -> None:
        """No new mutating call for this rollout from now on; in-flight device steps finish."""
        await tx.halt(env.data.rollout_id, f"{env.data.halted_by}: {env.data.reason}")

    async def gate_tripped(
        self, tx: UpdaterTx, env: Envelope[GateTripped], *, now: datetime
    ) -> None:
        """The gate tripped: stop new mutating work at once, before the planner's halt arrives,
        and flip the wave's nodes that activated the image back to their previous bank (each
        rollback item ends at once where nothing was activated)."""
        await tx.halt(env.data.rollout_id, f"gate tripped on wave {env.data.wave}")
        await tx.request_rollbacks(env.data.rollout_id, env.data.wave)

    async def drift_detected(
        self, tx: UpdaterTx, env: Envelope[DriftDetected], *, now: datetime
    ) -> None:
        """A node's drift includes a GSP / driver mismatch: under ``gsp_remedy``, record one GSP
        runbook item for it (held for approval, or claimable now). A repeated or redelivered
        event adds nothing while the node has one open (or one that gave up: a human decides);
        a node the inventory does not know fails at the runbook's preflight, nothing touched.

        A newer drift of the node replaces what it said before: a remedy still held for
        approval is withdrawn when the drift no longer names a GSP mismatch, or names another
        pinned driver (a node read mid-install during a rollout, judged against the pin the
        rollout was replacing, left a runbook waiting to reinstall the old branch)."""
        data = env.data
        decision = intake(self._gsp_remedy, data.items)
        if decision.intake is Intake.IGNORE:
            if await tx.withdraw_remedy(data.node_id, f"the drift changed: {decision.reason}"):
                log.info("%s: held GSP remedy withdrawn, %s", data.node_id, decision.reason)
            return
        if decision.pin and await tx.withdraw_remedy(
            data.node_id, f"the drift now pins driver {decision.pin}", unless_pin=decision.pin
        ):
            log.info("%s: held GSP remedy replaced, the pin is now %s", data.node_id, decision.pin)
        added = await tx.record_remedy(
            data.node_id,
            remedy_id(env.event_id.hex),
            held=decision.intake is Intake.HOLD,
            progress=document(RemedyProgress(pin=decision.pin or None)),
            correlation_id=env.correlation_id or str(env.event_id),
        )
        if added:
            log.info("%s: %s", data.node_id, decision.reason)

    async def drift_resolved(
        self, tx: UpdaterTx, env: Envelope[DriftResolved], *, now: datetime
    ) -> None:
        """The node conforms again: a GSP runbook item still waiting for approval has nothing
        left to repair and is withdrawn (``cancelled``); one already running goes on."""
        if await tx.withdraw_remedy(env.data.node_id, "drift resolved before approval"):
            log.info("%s: held GSP remedy withdrawn, the drift resolved", env.data.node_id)

    async def maintenance_changed(
        self, tx: UpdaterTx, env: Envelope[MaintenanceWindowsChanged], *, now: datetime
    ) -> None:
        """Keep the maintenance windows the planner holds for a pool or a site: no node's work
        starts outside them (``domain.windows``). An older announcement changes nothing."""
        data = env.data
        await tx.record_maintenance(data.scope, data.name, data.timezone, data.windows, data.set_at)
