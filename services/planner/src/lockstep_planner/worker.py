"""The planner's background loop: plans intents under a fenced lease, fires timers, carries out
operator commands.

Planning is here rather than in the ``intent.submitted`` handler because it asks the inventory
for the fleet (25 request/replies for 12,500 nodes) and takes up to seconds of CPU: no
JetStream message or database transaction is held meanwhile (design.md, reliability rule 3).
A claim bumps the intent's fencing token; the plan commits only if the token is still ours, so
a paused worker whose lease lapsed cannot commit a second rollout (and the rollouts table's
unique intent id would refuse it anyway). Timers (a wave's soak after a passed gate, a released
wave's deadline) and commands (pause, resume, abort, written by ``lockstep rollout``) are
level-triggered: whatever is due is found by a query, so a restart loses nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Callable
from datetime import datetime

import asyncpg

from lockstep_common.clock import SYSTEM_CLOCK, Clock
from lockstep_common.db import OUTAGE
from lockstep_common.errors import TransientError
from lockstep_common.periodic import Every
from lockstep_common.service import Resources
from lockstep_common.transitions import InvalidTransition
from lockstep_common.vocabulary import ChangeClass
from lockstep_planner.domain.approvals import canonical as canonical_signature
from lockstep_planner.domain.approvals import refusal as approval_refusal
from lockstep_planner.domain.class_rules import approval_shortfall
from lockstep_planner.domain.rollout import RolloutState, WaveState
from lockstep_planner.fabric_domains import after_wave, pin_domain, sync
from lockstep_planner.lifecycle import (
    PLANNER,
    advance,
    note,
    redrive,
    set_state,
    set_wave,
    start,
    stop,
)
from lockstep_planner.maintenance import announce_all
from lockstep_planner.planning import Planning, plan_intent, refuse
from lockstep_planner.store import (
    FABRIC_KEY,
    Command,
    DueWave,
    FleetSource,
    IntentRow,
    Occupancy,
    PlannerStore,
    PlannerTx,
    RolloutRow,
)

log = logging.getLogger(__name__)


class PlannerWorker:
    """The loop (a ``lockstep_common.service.Worker``)."""

    def __init__(
        self,
        planning: Planning,
        *,
        store: Callable[[Resources], PlannerStore],
        fleet: Callable[[Resources], FleetSource],
        poll_s: float,
        lease_s: float,
        max_attempts: int,
        occupancy: Callable[[Resources], Occupancy | None] = lambda _: None,
        fabric_sync_s: float = 30.0,
        clock: Clock = SYSTEM_CLOCK,
        wake_channel: str | None = None,
    ) -> None:
        self.planning = planning
        self._store, self._fleet, self._occupancy = store, fleet, occupancy
        self._poll_s, self._lease_s, self._max_attempts = poll_s, lease_s, max_attempts
        self._fabric_sync_s = fabric_sync_s
        self._synced: datetime | None = None
        self._clock = clock
        # NOTIFY channel of the schema's intents and commands (migration 0005): a committed
        # intent is planned at once instead of at the next poll.
        self._wake_channel = wake_channel
        self._wake = asyncio.Event()
        self._soak_end: datetime | None = None  # the next soak to end, read by ``timers``

    async def run(self, resources: Resources, stopping: asyncio.Event) -> None:
        """Work until stopped."""
        store, fleet = self._store(resources), self._fleet(resources)
        occupancy = self._occupancy(resources)
        async with self._listening(resources):
            await self.announce(store)

            async def one_pass() -> bool:
                self._wake.clear()  # a notice from now on is for work this pass may miss
                return await self.step(store, fleet, occupancy)

            every = Every(self._poll_s, what="planner worker", pause=self._idle)
            await every.run(one_pass, stopping)

    def idle_s(self, poll_s: float) -> float:
        """How long an idle pass waits: a poll, or less when a soak ends sooner (its wave then
        passes at its end, not up to a poll later, without polling faster all the time)."""
        if self._soak_end is None:
            return poll_s
        return min(poll_s, max(0.0, (self._soak_end - self._clock.now()).total_seconds()))

    async def _idle(self, stopping: asyncio.Event, seconds: float) -> None:
        """Until stopped, woken by a committed intent or command, a soak's end, or ``seconds``
        have passed."""
        seconds = self.idle_s(seconds)
        waits = [asyncio.ensure_future(stopping.wait()), asyncio.ensure_future(self._wake.wait())]
        try:
            await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()

    @contextlib.asynccontextmanager
    async def _listening(self, resources: Resources) -> AsyncIterator[None]:
        """LISTEN on the wake channel for as long as the worker runs; without it (a
        connection that cannot LISTEN), the poll alone finds the work."""
        conn = None
        if self._wake_channel is not None:
            try:
                conn = await resources.pool.acquire()
                await conn.add_listener(self._wake_channel, self._on_notify)
            except OUTAGE as exc:
                log.warning("planner worker cannot LISTEN (polling only): %s", exc)
        try:
            yield
        finally:
            if conn is not None:
                with contextlib.suppress(*OUTAGE):
                    await conn.remove_listener(self._wake_channel or "", self._on_notify)
                with contextlib.suppress(OSError, asyncpg.InterfaceError):
                    await resources.pool.release(conn)

    def _on_notify(self, *_: object) -> None:
        self._wake.set()

    async def announce(self, store: PlannerStore) -> None:
        """Announce the maintenance windows held, once at start (``maintenance.announce_all``);
        a failure is logged and the worker goes on (the windows stay as they were)."""
        try:
            async with store.transaction() as tx:
                count = await announce_all(tx)
        except Exception:
            log.exception("planner worker: maintenance windows not announced at start")
            return
        if count:
            log.info("announced the maintenance windows of %d pool(s) and site(s)", count)

    async def step(
        self, store: PlannerStore, fleet: FleetSource, occupancy: Occupancy | None = None
    ) -> bool:
        """One pass: commands, fabric domains when due, timers, then one intent. True when
        anything was done."""
        did = await self.commands(store)
        now = self._clock.now()
        due = self._synced is None or (now - self._synced).total_seconds() >= self._fabric_sync_s
        if occupancy is not None and due:
            did = await self.fabric(store, fleet, occupancy) or did
        did = await self.timers(store) or did
        return await self.intent(store, fleet) or did

    async def fabric(self, store: PlannerStore, fleet: FleetSource, occupancy: Occupancy) -> bool:
        """Learn the fabric domains from the fleet and their occupancy from the scheduler, and
        release a waiting wave whose domain became AVAILABLE. True when a wave was released.
        (Without a scheduler, domains are learned only when an intent is planned.)"""
        self._synced = self._clock.now()  # a silent inventory or scheduler is asked next period
        try:
            nodes = await fleet.nodes(None)
            busy = await occupancy.busy_nodes()
        except TransientError as exc:
            log.warning("fabric domains not refreshed: %s", exc)
            return False
        now = self._clock.now()
        async with store.transaction() as tx:
            freed = await sync(tx, nodes, busy, now)
            for rollout_id in sorted(freed):
                rollout = await tx.rollout(rollout_id)
                if rollout is not None:
                    await advance(tx, rollout, self.planning.timing, now)
        return bool(freed)

    async def intent(self, store: PlannerStore, fleet: FleetSource) -> bool:
        """Claim one intent and plan it; False when none was waiting."""
        async with store.transaction() as tx:
            row = await tx.claim_intent(self._lease_s, self._clock.now())
        if row is None:
            return False
        if row.attempts > self._max_attempts:
            async with store.transaction() as tx:
                if await tx.still_holds(row):
                    await refuse(
                        tx,
                        row,
                        [f"planning did not complete in {self._max_attempts} attempts"],
                        self._clock.now(),
                    )
            return True
        await self.plan_claimed(store, fleet, row)
        return True

    async def plan_claimed(self, store: PlannerStore, fleet: FleetSource, row: IntentRow) -> str:
        """Plan an intent this worker holds (claimed, or recorded held by ``rollout start``):
        ``decided``, or why not yet (it is planned again once its lease lapses)."""
        try:
            nodes = await fleet.nodes(None)  # all of it: a scope may cut a fabric domain
        except TransientError as exc:
            log.warning("intent %s: %s; retried when its lease lapses", row.intent_id, exc)
            return f"the fleet could not be read: {exc}"
        async with store.transaction() as tx:
            if not await tx.still_holds(row):
                log.warning("intent %s was taken over; discarding this plan", row.intent_id)
                return "taken over by another pass of the planner"
            # The fleet was just read: the fabric domains learn their nodes from it too.
            await sync(tx, nodes, None, self._clock.now())
            # The plan itself runs here, in the transaction: it is pure CPU (under 2 s for
            # 12,500 nodes, `lockstep bench plan`), and its result must commit with the fence.
            await plan_intent(tx, row, nodes, self.planning, self._clock.now())
        return "decided"

    async def timers(self, store: PlannerStore, limit: int = 32) -> bool:
        """Pass soaked waves whose gate passed; halt rollouts whose released wave missed its
        deadline; release again a released wave none of whose nodes moved for a while."""
        now = self._clock.now()
        async with store.transaction() as tx:
            due = await tx.due(now, limit, self.planning.timing.redrive_s)
            for item in due:
                await self._fire(tx, item, now)
            self._soak_end = await tx.next_soak_end(now)
        return bool(due)

    async def _fire(self, tx: PlannerTx, item: DueWave, now: datetime) -> None:
        rollout = await tx.rollout(item.rollout_id)
        if rollout is None or rollout.state not in (RolloutState.RUNNING, RolloutState.PAUSED):
            return
        if item.why == "redrive":
            wave = next(w for w in await tx.waves(rollout.rollout_id) if w.number == item.number)
            if rollout.state is RolloutState.RUNNING and wave.state is WaveState.RELEASED:
                await redrive(tx, rollout, wave, self.planning.timing, now)
        elif item.why == "deadline":
            await stop(
                tx,
                rollout,
                RolloutState.HALTED,
                reason=f"wave {item.number} made no progress within its deadline",
                by="policy",
                now=now,
                wave_state=WaveState.TIMED_OUT,
                wave_number=item.number,
            )
        else:
            await advance(tx, rollout, self.planning.timing, now)

    async def commands(self, store: PlannerStore, limit: int = 32) -> bool:
        """Carry out operators' pause, resume and abort, each with an audit line."""
        now = self._clock.now()
        async with store.transaction() as tx:
            todo = await tx.open_commands(limit)
            for command in todo:
                outcome = await self._carry_out(tx, command, now)
                await tx.finish_command(command.id, outcome, now)
        return bool(todo)

    async def _approve(
        self, tx: PlannerTx, rollout: RolloutRow, command: Command, now: datetime
    ) -> str:
        """Count a signed approval of the rollout's plan; start it once the class's are in."""
        approval = command.approval
        problem: str | None
        if approval is None:
            problem = "no signed approval given"
        elif rollout.state is not RolloutState.PLANNED or rollout.dry_run:
            problem = f"rollout is {'a dry run' if rollout.dry_run else rollout.state}: only a "
            problem += "planned rollout waiting for approval can be approved"
        else:
            problem = approval_refusal(
                approval,
                rollout_id=rollout.rollout_id,
                plan_hash=rollout.plan_hash,
                keys=self.planning.approvers,
                seen=rollout.signatures,
            )
        if problem is not None or approval is None:
            await note(
                tx, rollout.rollout_id, command.requested_by, "approval refused", str(problem), now
            )
            return f"refused: {problem}"
        approved = dataclasses.replace(
            rollout,
            approvals=(*rollout.approvals, approval.approver),
            signatures=(*rollout.signatures, canonical_signature(approval.signature)),
            updated_at=now,
        )
        await tx.save_rollout(approved)
        await note(
            tx,
            rollout.rollout_id,
            approval.approver,
            "approved",
            f"plan {rollout.plan_hash}: signature verified against the approvers trust store",
            now,
        )
        change_class = ChangeClass(rollout.change_class)
        short = approval_shortfall(
            change_class, self.planning.policy[change_class], approved.approvals
        )
        if short is not None:
            await note(tx, rollout.rollout_id, PLANNER, "awaiting approval", short, now)
            return f"done; {short}"
        await start(tx, approved, self.planning.timing, now, ", ".join(approved.approvals))
        return "done"

    async def _carry_out(self, tx: PlannerTx, command: Command, now: datetime) -> str:
        if command.action == "pin":
            return await pin_domain(
                tx,
                command.rollout_id.removeprefix(FABRIC_KEY),
                command.bundle,
                command.requested_by,
                now,
            )
        rollout = await tx.rollout(command.rollout_id)
        if rollout is None:
            return f"refused: no rollout {command.rollout_id}"
        why = f" ({command.reason})" if command.reason else ""
        if command.action == "approve":
            return await self._approve(tx, rollout, command, now)
        try:
            if command.action == "pause":
                await set_state(
                    tx, rollout, RolloutState.PAUSED, now, f"paused by {command.requested_by}{why}"
                )
                await note(
                    tx,
                    rollout.rollout_id,
                    command.requested_by,
                    "paused",
                    f"no new wave until resumed{why}",
                    now,
                )
            elif command.action == "resume":
                running = await set_state(tx, rollout, RolloutState.RUNNING, now, "")
                # A wave held by an inconclusive gate is accepted by the human who resumes.
                for wave in await tx.waves(rollout.rollout_id):
                    if wave.state is WaveState.HELD:
                        await set_wave(tx, wave, WaveState.PASSED)
                        await after_wave(tx, rollout, wave.node_ids, now)
                        await note(
                            tx,
                            rollout.rollout_id,
                            command.requested_by,
                            "wave accepted",
                            f"wave {wave.number} held by an inconclusive gate, accepted on "
                            f"resume{why}",
                            now,
                        )
                await note(
                    tx,
                    rollout.rollout_id,
                    command.requested_by,
                    "resumed",
                    why.strip() or "resumed",
                    now,
                )
                await advance(tx, running, self.planning.timing, now)
            else:
                await stop(
                    tx,
                    rollout,
                    RolloutState.ABORTED,
                    reason=f"aborted by {command.requested_by}{why}",
                    by=command.requested_by,
                    now=now,
                )
        except InvalidTransition as exc:
            await note(
                tx,
                rollout.rollout_id,
                command.requested_by,
                f"{command.action} refused",
                str(exc),
                now,
            )
            return f"refused: {exc}"
        return "done"
