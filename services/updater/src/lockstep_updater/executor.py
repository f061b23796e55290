"""Runs node work items one step at a time, under fenced leases, against BMCs and a scheduler.

The loop is level-triggered: every claim re-reads the item's state and runs the step it names,
so a crashed or superseded worker's item is simply re-driven by the next claim (issue 12,
"resume anything"). The executor is the loop only: claim an item, read its typed progress
(``domain.progress``) and its node, look the step up in ``steps.STEPS`` and run it with the
one :class:`~lockstep_updater.steps.context.StepContext`; what a step raises is turned into a
commit here (a wait, a retry, an ending). Each step:

1. re-reads the node's facts from the inventory (``NodeFacts``) before any write;
2. right before every mutating call (push, cordon, activate), checks in one transaction that
   it still holds the item (fencing token) and that the rollout is not halted, the wave was
   released, the node is in the wave and in the approved plan, and (when the node leaves
   service) that its pool's out-of-service budget holds (``domain.guard``); the same
   transaction records what it is about to send, so a re-run never sends it again;
3. commits the next state, the step's history row and its ``device.*`` events together.

Never twice: a push is recorded as ``sent`` before it is sent (``steps.push``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from datetime import datetime
from typing import cast

from lockstep_common.backoff import Backoff
from lockstep_common.clock import SYSTEM_CLOCK, Clock, WallOnly
from lockstep_common.errors import PermanentError
from lockstep_common.fleet_query import InventoryUnavailable
from lockstep_common.periodic import Every
from lockstep_common.vocabulary import clip_text
from lockstep_redfish.errors import BmcError, BmcUnavailable, CredentialError, ImageDigestMismatch
from lockstep_redfish.image_server import ImageServer
from lockstep_updater.adapters.credentials import FleetCredentials
from lockstep_updater.domain.orphans import ORPHANABLE, orphan_end
from lockstep_updater.domain.progress import Progress, UnknownProgress, document, load
from lockstep_updater.domain.steps import NodeStep
from lockstep_updater.ports import Images, ListsOwnDrains, NodeAgent, NodeFacts, Scheduler
from lockstep_updater.steps import STEPS
from lockstep_updater.steps.context import InBandChannel, StepContext, sha384_of
from lockstep_updater.steps.ends import LostClaim, NotYet, Stop, failure_end, waits_on_device
from lockstep_updater.steps.lease_fence import holding, renewed
from lockstep_updater.steps.policy import ExecutorPolicy
from lockstep_updater.store import Claim, UpdaterStore, one_statement

log = logging.getLogger(__name__)
S = NodeStep

__all__ = ["Executor", "ExecutorPolicy", "LostClaim", "NotYet", "Stop", "sha384_of"]


class Executor:
    """Claims one work item at a time and runs its current step (see the module docstring)."""

    def __init__(
        self,
        store: UpdaterStore,
        facts: NodeFacts,
        scheduler: Scheduler,
        images: Images,
        policy: ExecutorPolicy | None = None,
        *,
        environ: dict[str, str] | None = None,
        image_server: ImageServer | None = None,
        agent: NodeAgent | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.store = store
        self.policy = policy or ExecutorPolicy()
        self.ctx = StepContext(
            store,
            facts,
            scheduler,
            images,
            self.policy,
            FleetCredentials(environ),
            clock=clock,
            image_server=image_server,
            in_band=InBandChannel(agent, self.policy.reboot_deadline_s),
        )
        # Called as soon as a claim succeeds, before its step runs (the worker wakes idle
        # claim loops with it: lockstep_updater.idle).
        self.on_claim: Callable[[], None] = lambda: None

    # What a step reads and drives, replaceable after construction (tests wrap them).
    @property
    def facts(self) -> NodeFacts:
        return self.ctx.facts

    @facts.setter
    def facts(self, facts: NodeFacts) -> None:
        self.ctx.facts = facts

    @property
    def scheduler(self) -> Scheduler:
        return self.ctx.scheduler

    @scheduler.setter
    def scheduler(self, scheduler: Scheduler) -> None:
        self.ctx.scheduler = scheduler

    @property
    def image_server(self) -> ImageServer | None:
        return self.ctx.image_server

    @image_server.setter
    def image_server(self, server: ImageServer | None) -> None:
        self.ctx.image_server = server

    @property
    def inband(self) -> InBandChannel:
        """The node agent's channel and the in-band reboot deadline."""
        return self.ctx.in_band

    @property
    def chains(self) -> Callable[[], bool]:
        """Whether a claim whose step moved its item on runs the next step itself when it is
        ready (``UpdaterTx.advance`` with ``keep_lease_s``): a node goes from preflight to
        its first wait without queueing behind every other node for each step. The worker
        turns it off when the service stops, so that no lease is kept by a worker about to
        end."""
        return self.ctx.chains

    @chains.setter
    def chains(self, chains: Callable[[], bool]) -> None:
        self.ctx.chains = chains

    @property
    def clock(self) -> Clock:
        """The clock every step reads (maintenance windows, deadlines, durations)."""
        return self.ctx.clock

    @clock.setter
    def clock(self, clock: Clock | Callable[[], datetime]) -> None:
        if hasattr(clock, "monotonic"):
            self.ctx.clock = cast(Clock, clock)
        else:
            self.ctx.clock = WallOnly(clock)

    async def step(self) -> bool:
        """Claim one item and run its step; False when there was nothing to claim."""
        with holding(self.clock, self.policy.lease_s):  # the sender's own fence (lease_fence)
            async with one_statement(self.store) as tx:
                claim = await tx.claim(self.policy.lease_s)
            if claim is None:
                return False
            self.on_claim()
            await self.run_on(claim)
        return True

    async def run_on(self, claim: Claim) -> None:
        """Run ``claim``'s step, then every next step its commit kept the item for; a claim
        lost meanwhile (``LostClaim``) ends the run and logs the node's BMC session out."""
        held: Claim | None = claim
        while held is not None:
            held = await self._run_held(held)

    async def _run_held(self, claim: Claim) -> Claim | None:
        """One step under its lease, renewed while it runs; the claim kept for the next step
        (an exception out of ``run`` drops it: its lease lapses as after a crash)."""
        renewing = asyncio.create_task(self._renew(claim))
        try:
            await self.run(claim)
        except LostClaim:
            log.warning("%s: work item taken over by another claim", claim.node_id)
            await self.ctx.sessions.close(claim.node_id)  # the node is another claim's now
        finally:
            renewing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewing
            kept = self.ctx.kept.pop((claim.id, claim.token), None)
        return kept

    async def _renew(self, claim: Claim) -> None:
        """Keep the lease while a step runs longer than it (a task may run for hours): the
        lease then lapses only when this process stops, which is what it is for."""
        lost = asyncio.Event()

        async def renew() -> None:
            since = self.clock.monotonic()
            async with one_statement(self.store) as tx:
                held = await tx.still_holds(claim, self.policy.lease_s)
            renewed(since) if held else lost.set()  # renewed: writes may go on (lease_fence)

        # A renewal the database refused is logged and tried again a third of a lease later:
        # two more chances before the lease can lapse under a step that is still running.
        every = Every(self.policy.lease_s / 3, what=f"lease of {claim.node_id}", wait_first=True)
        await every.run(renew, lost)

    async def close(self) -> None:
        """Log out every BMC session still open (the worker stops)."""
        await self.ctx.sessions.close_all()

    async def sweep_parked(self) -> int:
        """The per-pool sweep behind the wake on a freed place: every parked item of a halted
        rollout, and in each pool with parked items as many as it has free places (at least
        one), made claimable; one transaction per pool, under its lock. Returns how many."""
        async with self.store.transaction() as tx:
            woke = await tx.wake_halted()
            pools = await tx.parked_pools()
        for pool in pools:
            async with self.store.transaction() as tx:
                woke += await tx.wake_parked(pool)
        return woke

    async def drain_all(self, limit: int = 10_000) -> int:
        """Run steps until none is claimable now (tests and benchmarks); returns the count."""
        count = 0
        while count < limit and await self.step():
            count += 1
        return count

    async def reap(self, ttl_s: float) -> int:
        """End the items of workers that died holding a node cordoned: every item in a
        draining, activating or uncordoning step that no claim has held for ``ttl_s`` (more
        than a lease: a live worker renews its lease every third of it). A drain with nothing
        written yet is given back and the node fails with the reason; a node whose firmware may
        have changed is quarantined (``domain.orphans``). Items already giving their node back
        are finished at once, fenced as a worker's claim. Returns how many items were taken."""
        count = 0
        for idle_s, states in ((ttl_s, ORPHANABLE), (0.0, frozenset({S.UNCORDONING}))):
            while True:
                with holding(self.clock, self.policy.lease_s):
                    async with self.store.transaction() as tx:
                        claim = await tx.claim_orphan(idle_s, self.policy.lease_s, states)
                    if claim is None:
                        break
                    count += 1
                    try:
                        if claim.state is S.UNCORDONING:
                            await self.run_on(claim)
                        else:
                            await self._orphaned(claim, ttl_s)
                    except LostClaim:
                        log.warning("%s: orphaned item taken over by another claim", claim.node_id)
        return count

    async def give_back_strays(self) -> list[str]:
        """Give back every drain of Lockstep's that no work item holds: a cordon that took
        effect after its item ended (its worker killed with the request on the wire, a Slurm
        ``scontrol`` outliving its updater: found by the chaos test), which nothing else would
        ever release. Decided and resumed under the node's item locks, so an item moving
        meanwhile waits. A scheduler that cannot list its drains is not swept."""
        if not isinstance(self.scheduler, ListsOwnDrains):
            return []
        given = []
        for node_id in await self.scheduler.own_drains():
            async with self.store.transaction() as tx:
                if await tx.holds_node_out(node_id) or not await self.scheduler.resume(node_id):
                    continue
            log.warning("%s: gave back a drain of Lockstep's that no work item held", node_id)
            given.append(node_id)
        return given

    async def redrive_completions(self, after_s: float, max_redrives: int) -> int:
        """Publish again the ``wave.completed`` of each completed wave the planner has not
        visibly acted on: no later wave of its rollout released, the rollout not halted, and
        ``after_s`` (doubling with each re-drive, at most ``max_redrives`` of them) gone by.

        Level-triggered, like the planner's re-drive of a release (test plan A4): a completion
        the broker acknowledged and then lost (lazy fsync, reliability.md 1.6) would otherwise
        leave the wave unsoaked until its deadline halted the rollout. The copy is the same
        event, which consumers' inboxes drop where it arrived; the last wave of a rollout has
        no later wave to end its re-drives, so they are bounded. Returns how many were sent."""
        count = 0
        while True:
            async with self.store.transaction() as tx:
                due = await tx.unanswered_completions(after_s, max_redrives, limit=32)
                for completion in due:
                    sent = await tx.redrive_completion(completion)
                    log.log(
                        logging.INFO if sent else logging.WARNING,
                        "wave.completed of %s wave %d (event %s): %s",
                        completion.rollout_id,
                        completion.wave,
                        completion.event_id,
                        f"published again (re-drive {completion.redrives + 1})"
                        if sent
                        else "no longer in the outbox, not re-driven",
                    )
            count += len(due)
            if len(due) < 32:
                return count

    async def _orphaned(self, claim: Claim, ttl_s: float) -> None:
        try:
            progress = load(claim.kind, claim.progress)
        except UnknownProgress as exc:
            await self._unreadable(claim, exc)
            return
        target = orphan_end(claim.state, document(progress))
        reason = f"orphaned: no worker held the {claim.state.value} step for {ttl_s:g}s"
        if target is S.UNCORDONING:
            progress.ending = S.FAILED
            reason += "; Lockstep's drain given back"
        else:
            reason += "; the firmware may have changed, kept out of service"
        await self.ctx.end(claim, target, reason, progress)

    # -- one step --------------------------------------------------------------------------

    async def run(self, claim: Claim) -> None:
        """Run the claimed item's step (``STEPS``) and commit what it raised."""
        ctx = self.ctx
        try:
            progress = load(claim.kind, claim.progress)
        except UnknownProgress as exc:
            await self._unreadable(claim, exc)
            return
        step = STEPS.get(claim.state)
        if step is None:  # a claim never hands out pending or an end: nothing runs there
            log.error("%s: no step runs in %s", claim.node_id, claim.state.value)
            return
        started = ctx.clock.monotonic()
        try:
            node = await ctx.node(claim)
            progress.inventory_waits = 0
            await step.runner(claim.kind)(ctx, claim, node, progress, started)
        except Stop as stop:
            await ctx.end(claim, stop.target, stop.reason, progress)
        except NotYet as waiting:
            progress.dark_since = None  # the BMC answered
            await ctx.commit(claim, claim.state, str(waiting), progress, self.policy.retry_s)
        except CredentialError as exc:
            await ctx.end(claim, failure_end(claim), str(exc), progress)
        except InventoryUnavailable as exc:
            await self._wait_for_inventory(claim, progress, exc)
        except (BmcUnavailable, OSError) as exc:
            await self._retry_or_give_up(claim, progress, exc)
        except (BmcError, ImageDigestMismatch, PermanentError) as exc:
            # A BMC that refuses, answers malformed, an image that changed, or a scheduler that
            # refuses (a node it does not know, no privilege): permanent.
            await ctx.end(claim, failure_end(claim), str(exc), progress)

    async def _unreadable(self, claim: Claim, exc: UnknownProgress) -> None:
        """A progress document this release cannot read: written by a later release (an
        upgrade rolled back mid-rollout) or of a shape no release writes any more. Its step
        cannot be resumed from it, and guessing could send a write twice or give back a node
        whose firmware changed, so nothing of the node is touched and the document is kept as
        stored: the item stays in its step with the reason and is claimed again a lease later
        (an updater that reads it, the later release back, then resumes it; meanwhile the
        stuck-step alert and ``lockstep node history`` show why). Raising instead left the
        claim to lapse and be taken again at once, forever."""
        reason = f"progress unreadable by this updater, left as stored: {exc}"
        log.error("%s: %s (%s step kept)", claim.node_id, reason, claim.state.value)
        async with self.store.transaction() as tx:
            if not await tx.still_holds(claim, self.policy.lease_s):
                raise LostClaim
            await tx.advance(
                claim, claim.state, reason=clip_text(reason), retry_in_s=self.policy.lease_s
            )

    async def _retry_or_give_up(self, claim: Claim, progress: Progress, exc: Exception) -> None:
        """Nothing was decided: run the step again after a pause, up to ``max_errors`` times
        in a row; then the node ends with the last error as its reason. Giving a node back
        (uncordoning) is never given up: a node must not stay cordoned by Lockstep."""
        ctx = self.ctx
        if isinstance(exc, BmcUnavailable) and waits_on_device(claim.state, progress):
            # Something was accepted and the BMC may be resetting: it is given time, not tries
            # (a login refused every retry_s would spend max_errors in well under a minute).
            now = ctx.wall()
            if progress.dark_since is None:
                progress.dark_since = now
            limit = self.policy.update.reachable_s
            if now - progress.dark_since >= limit:
                reason = f"the BMC did not come back within {limit:g}s: {exc}"
                await ctx.end(claim, failure_end(claim), reason, progress)
                return
            reason = f"waiting for the BMC: {exc}"
            await ctx.commit(claim, claim.state, reason, progress, self.policy.retry_s)
            return
        count = progress.errors[claim.state.value] = progress.errors.get(claim.state.value, 0) + 1
        if count > self.policy.max_errors and claim.state is not S.UNCORDONING:
            reason = f"gave up after {count - 1} retries: {exc}"
            await ctx.end(claim, failure_end(claim), reason, progress)
            return
        await ctx.commit(claim, claim.state, f"retrying: {exc}", progress, self.policy.retry_s)

    async def _wait_for_inventory(
        self, claim: Claim, progress: Progress, exc: InventoryUnavailable
    ) -> None:
        """The inventory did not answer for the node: the control plane, not the node, is at
        fault, and nothing was sent (the node is read before every step). The node waits in its
        step, however long (the stuck-step alert sees it), instead of spending ``max_errors``
        and failing into its wave's failure budget; and the wait doubles, with jitter, so that
        a whole wave of askers does not keep an overloaded inventory overloaded (at 12,500
        nodes a retry every ``retry_s`` against a slow inventory was a congestion collapse)."""
        waits = progress.inventory_waits
        progress.inventory_waits = waits + 1
        backoff = Backoff(self.policy.retry_s, self.policy.inventory_backoff_max_s, jitter=0.5)
        pause = backoff.delay(waits)
        reason = f"waiting for the inventory: {exc}"
        await self.ctx.commit(claim, claim.state, reason, progress, pause)
