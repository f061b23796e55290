"""Runs node work items one step at a time, under fenced leases, against BMCs and a scheduler.

The loop is level-triggered: every claim re-reads the item's state and runs the step it names,
so a crashed or superseded worker's item is simply re-driven by the next claim (issue 12,
"resume anything"). Each step:

1. re-reads the node's facts from the inventory (``NodeFacts``) before any write;
2. right before every mutating call (push, cordon, activate), checks in one transaction that
   it still holds the item (fencing token) and that the rollout is not halted, the wave was
   released, the node is in the wave and in the approved plan, and (when the node leaves
   service) that its pool's out-of-service budget holds (``domain.guard``); the same
   transaction records what it is about to send, so a re-run never sends it again;
3. commits the next state, the step's history row and its ``device.*`` events together.

Never twice: a push is recorded as ``sent`` before it is sent. A later run that finds ``sent``
does not push; it follows the recorded task or reads the members (``Staged``, ``Version``)
and, when it cannot tell, stops the node with the reason instead of sending again.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from lockstep_common import subjects
from lockstep_common.envelope import EventData
from lockstep_common.errors import PermanentError
from lockstep_common.events.v1 import (
    AttestedComponent,
    DeviceActivated,
    DeviceFailed,
    DeviceRolledBack,
    DeviceStaged,
    DeviceVerified,
    FleetNode,
    WaveCompleted,
)
from lockstep_common.fleet_query import InventoryUnavailable
from lockstep_common.vocabulary import Component, DeviceOutcome, clip_text
from lockstep_redfish import BmcTarget, RedfishClient, RetryPolicy
from lockstep_redfish.errors import (
    BmcError,
    BmcUnavailable,
    CredentialError,
    ImageDigestMismatch,
    PushOutcomeUnknown,
)
from lockstep_redfish.image import FirmwareImage
from lockstep_redfish.image_server import ImageServer
from lockstep_redfish.models import UpdatableSoftware
from lockstep_redfish.preflight import Method, UpdateRequest
from lockstep_redfish.session import BmcSession
from lockstep_redfish.tasks import TaskRef
from lockstep_redfish.update import FirmwareUpdate, UpdatePolicy
from lockstep_updater.adapters.bmc_account import session_roles
from lockstep_updater.adapters.credentials import FleetCredentials
from lockstep_updater.adapters.member_devices import member_pci_ids
from lockstep_updater.domain.guard import Decision, Verdict, decide, decide_remedy
from lockstep_updater.domain.orphans import ORPHANABLE, orphan_end
from lockstep_updater.domain.privilege import account_refusal
from lockstep_updater.domain.steps import TERMINAL, NodeStep
from lockstep_updater.domain.targets import applicable_members, targets_for
from lockstep_updater.domain.windows import closed
from lockstep_updater.inband_step import InBandSteps, in_band_names
from lockstep_updater.ports import (
    DrainState,
    ExplainsDrain,
    ForeignDrain,
    Images,
    NodeAgent,
    NodeFacts,
    Scheduler,
)
from lockstep_updater.store import REMEDY, ROLLBACK, Claim, Target, UpdaterStore, UpdaterTx

log = logging.getLogger(__name__)
FIRMWARE_INVENTORY = "/redfish/v1/UpdateService/FirmwareInventory"
S = NodeStep
CHANGED = frozenset({S.ACTIVATING, S.AWAITING_BMC, S.VERIFYING, S.IN_BAND})
"""Steps after which the running firmware may have changed: a failure quarantines the node."""
KEEPS_CORDON = frozenset({S.DRAINING, *CHANGED, S.QUARANTINED})
"""Steps in which the node must stay cordoned (uncordoning gives it back, once, itself)."""
_JITTER = random.Random()  # noqa: S311 - backoff jitter, not cryptography


@dataclass(frozen=True, slots=True)
class ExecutorPolicy:
    """Bounds of the executor (seconds)."""

    lease_s: float = 900.0  # longer than one step's longest wait (a task deadline)
    retry_s: float = 5.0  # before a step that could not finish is tried again
    drain_poll_s: float = 5.0
    drain_deadline_s: float = 3600.0
    # A node waiting for its pool's budget is woken when a place frees (``UpdaterTx.advance``
    # with ``parked``); this re-check is only the level-triggered net behind that wake.
    budget_recheck_s: float = 60.0
    # How long a worker follows a pushed image's task before it gives the node back to the
    # queue (re-claimed after ``retry_s``): a GPU stages for a quarter of an hour (seed 000),
    # and a worker held that long caps how many nodes of a wave stage at once.
    task_hold_s: float = 60.0
    max_errors: int = 20  # failed tries of one step in a row before the node ends
    # A step that cannot read its node from the inventory waits (not a try of the node's):
    # retry_s, then twice as long each time, up to this, with jitter.
    inventory_backoff_max_s: float = 60.0
    remedy_max_unavailable: int = 1  # a pool's nodes out of service a GSP remedy may join
    reboot_deadline_s: float = 1800.0  # an in-band reboot not back by then: quarantined
    update: UpdatePolicy = field(default_factory=UpdatePolicy)
    transport: RetryPolicy = field(default_factory=RetryPolicy)


class LostClaim(Exception):
    """Another claim took the item over: this worker stops touching it."""


class Stop(Exception):
    """The step ends here, in ``target`` (raised from deep inside a step)."""

    def __init__(self, target: NodeStep, reason: str) -> None:
        super().__init__(reason)
        self.target = target
        self.reason = reason


class NotYet(Exception):
    """The step waits on a device (a BMC's task still running after ``task_hold_s``, a BMC
    not answering yet after a reset): it is run again after ``retry_s``, by whoever claims
    the item then."""


def _nothing() -> None:
    pass


def _always() -> bool:
    return True


def _utcnow() -> datetime:
    return datetime.now(UTC)


def sha384_of(data: bytes) -> str:
    return hashlib.sha384(data).hexdigest()


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
    ) -> None:
        self.store = store
        self.facts = facts
        self.scheduler = scheduler
        self.images = images
        self.policy = policy or ExecutorPolicy()
        # Where a BMC without a multipart push URI pulls images from (SimpleUpdate); None: such
        # a BMC's node fails at its push (nothing is offered).
        self.image_server = image_server
        self.credentials = FleetCredentials(environ)
        self.client = RedfishClient(self.credentials, self.policy.transport)
        # Called as soon as a claim succeeds, before its step runs (the worker wakes idle
        # claim loops with it: lockstep_updater.idle).
        self.on_claim: Callable[[], None] = _nothing
        # Whether a claim whose step moved its item on runs the next step itself when it is
        # ready (``UpdaterTx.advance`` with ``keep_lease_s``): a node goes from preflight to
        # its first wait without queueing behind every other node for each step (a claim,
        # with its transaction, per step). The worker turns it off when the service stops, so
        # that no lease is kept by a worker about to end.
        self.chains: Callable[[], bool] = _always
        # The wall clock maintenance windows are judged by (tests move it).
        self.clock: Callable[[], datetime] = _utcnow
        # The claims ``_commit`` kept, by the (item, token) of the claim that ran the step.
        self._kept: dict[tuple[int, int], Claim] = {}
        # The node agent's in-band channel (driver package unit, the GSP runbook); None: a
        # node with in-band work fails with that reason.
        self.inband = InBandSteps(
            agent,
            check=self._check_in_band,
            commit=self._commit,
            save=self._save,
            image=self._image,
            poll_s=self.policy.retry_s,
            reboot_deadline_s=self.policy.reboot_deadline_s,
        )

    async def step(self) -> bool:
        """Claim one item and run its step; False when there was nothing to claim."""
        async with self.store.transaction() as tx:
            claim = await tx.claim(self.policy.lease_s)
        if claim is None:
            return False
        self.on_claim()
        await self._run_on(claim)
        return True

    async def _run_on(self, claim: Claim) -> None:
        """Run the claim's step, then every next step its commit kept the item for."""
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
        finally:
            renewing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewing
            kept = self._kept.pop((claim.id, claim.token), None)
        return kept

    async def _renew(self, claim: Claim) -> None:
        """Keep the lease while a step runs longer than it (a task may run for hours): the
        lease then lapses only when this process stops, which is what it is for."""
        while True:
            await asyncio.sleep(self.policy.lease_s / 3)
            async with self.store.transaction() as tx:
                if not await tx.still_holds(claim, self.policy.lease_s):
                    return

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
        are finished right away. Returns how many items were taken."""
        count = 0
        for idle_s, states in ((ttl_s, ORPHANABLE), (0.0, frozenset({S.UNCORDONING}))):
            while True:
                async with self.store.transaction() as tx:
                    claim = await tx.claim_orphan(idle_s, self.policy.lease_s, states)
                if claim is None:
                    break
                count += 1
                try:
                    if claim.state is S.UNCORDONING:
                        await self._run_on(claim)
                    else:
                        await self._orphaned(claim, ttl_s)
                except LostClaim:
                    log.warning("%s: orphaned item taken over by another claim", claim.node_id)
        return count

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
        progress = claim.progress
        target = orphan_end(claim.state, progress)
        reason = f"orphaned: no worker held the {claim.state.value} step for {ttl_s:g}s"
        if target is S.UNCORDONING:
            progress["ending"] = S.FAILED.value
            reason += "; Lockstep's drain given back"
        else:
            reason += "; the firmware may have changed, kept out of service"
        await self._end(claim, target, reason, progress)

    # -- dispatch --------------------------------------------------------------------------

    async def run(self, claim: Claim) -> None:
        progress = claim.progress
        started = time.monotonic()
        try:
            node = await self._node(claim)
            progress.pop("inventory_waits", None)
            await self._step_of(claim, node, progress, started)
        except Stop as stop:
            await self._end(claim, stop.target, stop.reason, progress)
        except NotYet as waiting:
            progress.pop("dark_since", None)  # the BMC answered
            await self._commit(claim, claim.state, str(waiting), progress, self.policy.retry_s)
        except CredentialError as exc:
            await self._end(claim, self._failure_end(claim), str(exc), progress)
        except InventoryUnavailable as exc:
            await self._wait_for_inventory(claim, progress, exc)
        except (BmcUnavailable, OSError) as exc:
            await self._retry_or_give_up(claim, progress, exc)
        except (BmcError, ImageDigestMismatch, PermanentError) as exc:
            # A BMC that refuses, answers malformed, an image that changed, or a scheduler that
            # refuses (a node it does not know, no privilege): permanent.
            await self._end(claim, self._failure_end(claim), str(exc), progress)

    async def _step_of(
        self, claim: Claim, node: FleetNode, progress: dict[str, Any], started: float
    ) -> None:
        if claim.state is S.PREFLIGHT:
            await self._preflight_of(claim, node, progress)
        elif claim.state in (S.STAGING, S.ACTIVATING, S.VERIFYING):
            await self._timed_step(claim, node, progress, started)
        elif claim.state is S.CORDONING:
            await self._cordoning(claim, node, progress)
        elif claim.state is S.DRAINING:
            await self._draining(claim, node, progress)
        elif claim.state is S.AWAITING_BMC:
            await self._awaiting_bmc(claim, node, progress)
        elif claim.state is S.IN_BAND:
            await self.inband.run(claim, node, progress)
        elif claim.state is S.UNCORDONING:
            await self._uncordoning(claim, progress)

    async def _preflight_of(self, claim: Claim, node: FleetNode, progress: dict[str, Any]) -> None:
        if claim.kind == REMEDY:
            await self.inband.remedy_preflight(claim, node, progress)
        elif claim.kind == ROLLBACK:
            await self._rollback_preflight(claim, progress)
        else:
            await self._preflight(claim, node, progress)

    async def _timed_step(
        self, claim: Claim, node: FleetNode, progress: dict[str, Any], started: float
    ) -> None:
        """The steps whose device events carry the step's duration."""
        if claim.state is S.STAGING:
            await self._staging(claim, node, progress, started)
        elif claim.state is S.ACTIVATING:
            await self._activating(claim, node, progress, started)
        else:
            await self._verifying(claim, node, progress, started)

    # -- steps -----------------------------------------------------------------------------

    async def _preflight(self, claim: Claim, node: FleetNode, progress: dict[str, Any]) -> None:
        decision = await self._check(claim, node, takes_out=False, starts_work=True)
        if decision.verdict is Verdict.WAIT:  # outside the maintenance windows: nothing written
            await self._commit(
                claim, S.PREFLIGHT, decision.reason, progress, self.policy.budget_recheck_s
            )
            return
        self._stop_unless_proceed(claim, decision)
        async with self.store.transaction() as tx:
            target = await tx.target(claim.rollout_id)
        if target is None:
            await self._commit(
                claim,
                S.PREFLIGHT,
                "waiting for the plan's attested bundle",
                progress,
                self.policy.retry_s,
            )
            return
        progress["pool"] = node.pool
        plans: dict[str, Any] = {}
        agent_side = in_band_names(claim.components)
        if agent_side:
            entries = {name: self._entry(target, node, name) for name in agent_side}
            await self.inband.plan_rollout(claim, target, node, entries, progress)
        async with self._session(node) as bmc:
            # Least privilege (reliability.md 7 H5): an Administrator-class account is refused
            # before anything is read for the update, so nothing is ever written with it.
            refusal = account_refusal(*await session_roles(bmc))
            if refusal is not None:
                raise Stop(S.FAILED, f"refused: {refusal}; nothing written")
            update = FirmwareUpdate(bmc, self.policy.update)
            members = await update.collection(FIRMWARE_INVENTORY)
            for name in claim.components:
                if name in agent_side:
                    continue
                entry = self._entry(target, node, name)
                paths = targets_for(Component(name), members)
                if not paths:
                    raise Stop(S.FAILED, f"{name}: no FirmwareInventory member holds it")
                image = self._image(target, entry)
                # Only the members whose device the package declares (domain.targets).
                paths = applicable_members(image.data, await member_pci_ids(bmc, paths))
                if not paths:
                    raise Stop(S.FAILED, f"{name}: the image applies to none of its members")
                request = UpdateRequest(paths, entry.version, stage=entry.banks == "ab")
                try:
                    plan = await update.preflight(image, request)
                except (BmcError, ImageDigestMismatch) as exc:
                    if isinstance(exc, BmcUnavailable):
                        raise
                    raise Stop(S.FAILED, f"{name}: {exc}") from None
                plans[name] = {
                    "version": entry.version,
                    "banks": entry.banks,
                    "targets": list(plan.pending),
                    "before": dict(plan.before),
                    "sent": False,
                    "task": None,
                    "done": not plan.pending,
                }
        progress["components"] = plans
        if all(p["done"] for p in plans.values()) and "in_band" not in progress:
            events = [
                (
                    DeviceOutcome.VERIFIED,
                    DeviceVerified(
                        rollout_id=claim.rollout_id,
                        node_id=claim.node_id,
                        component=Component(name),
                        from_version=p["version"],
                        to_version=p["version"],
                        duration_s=0.0,
                    ),
                )
                for name, p in plans.items()
            ]
            await self._commit(
                claim, S.DONE, "already at the target: nothing written", progress, events=events
            )
            return
        await self._commit(claim, S.STAGING, "", progress)

    async def _rollback_preflight(self, claim: Claim, progress: dict[str, Any]) -> None:
        """A flip back after a tripped gate: once the node's update has ended, which of its
        A/B images did it activate? None: nothing to undo. Else the previous images, still in
        the other bank, are the targets of the usual steps from cordoning on (drain, switch
        banks, wait for the BMC, read back, give the node back)."""
        async with self.store.transaction() as tx:
            update = await tx.update_item(claim.rollout_id, claim.node_id)
        if update is not None and update[0] not in TERMINAL:
            await self._commit(
                claim, S.PREFLIGHT, "waiting for the update to end", progress, self.policy.retry_s
            )
            return
        done = {} if update is None else update[1]
        activated = {
            name: plan
            for name, plan in done.get("components", {}).items()
            if done.get("activate_sent") and plan["banks"] == "ab" and plan.get("staged")
        }
        if not activated:
            await self._commit(
                claim, S.CANCELLED, "nothing was activated: nothing to flip back", progress
            )
            return
        progress["rollback"] = True
        progress["components"] = {}
        for name, plan in activated.items():
            previous = [v for v in plan["before"].values() if v]
            if not previous:
                raise Stop(S.FAILED, f"{name}: the version before the update is unknown")
            progress["components"][name] = {
                "version": previous[0],
                "banks": "ab",
                "targets": plan["targets"],
                "before": dict.fromkeys(plan["targets"], plan["version"]),
                "sent": False,
                "task": None,
                "done": False,
                "staged": True,  # the previous image waits in the other bank
            }
        # Through staging (nothing to push: every image is in place) to cordoning.
        await self._commit(claim, S.STAGING, "flip back: the previous images", progress)

    async def _staging(
        self, claim: Claim, node: FleetNode, progress: dict[str, Any], started: float
    ) -> None:
        events: list[tuple[DeviceOutcome, EventData]] = []
        async with self.store.transaction() as tx:
            target = await tx.target(claim.rollout_id)
        if target is None:
            raise Stop(S.FAILED, "the plan's attested bundle is no longer known")
        for name, plan in progress["components"].items():
            if plan["done"] or plan["banks"] != "ab" or plan.get("staged"):
                continue
            await self._push(claim, node, target, name, plan, progress, stage=True)
            if plan["done"]:
                continue
            plan["staged"] = True
            events.append(
                (DeviceOutcome.STAGED, self._device(DeviceStaged, claim, name, plan, started))
            )
        if all(p["done"] for p in progress["components"].values()) and not progress.get("in_band"):
            # Someone else brought every target to the version meanwhile: no drain needed.
            await self._commit(
                claim, S.DONE, "at the target: nothing written", progress, events=events
            )
            return
        await self._commit(claim, S.CORDONING, "", progress, events=events)

    async def _cordoning(self, claim: Claim, node: FleetNode, progress: dict[str, Any]) -> None:
        # The budget check and the move to draining commit in one transaction, under the
        # pool's lock: two workers cannot both take the pool's last place.
        async with self.store.transaction() as tx:
            if not await tx.still_holds(claim, self.policy.lease_s):
                raise LostClaim
            decision = await self._decide(tx, claim, node, takes_out=True, starts_work=True)
            if decision.verdict is Verdict.PROCEED:
                progress["cordoned_at"] = time.time()
                await tx.advance(claim, S.DRAINING, progress=progress)
                return
        if decision.verdict is Verdict.WAIT:
            await self._commit(
                claim,
                S.CORDONING,
                decision.reason,
                progress,
                self.policy.budget_recheck_s,
                parked=True,
            )
            return
        self._stop_unless_proceed(claim, decision)

    async def _draining(self, claim: Claim, node: FleetNode, progress: dict[str, Any]) -> None:
        decision = await self._check(claim, node, takes_out=False)
        if decision.verdict is not Verdict.PROCEED:
            progress["ending"] = _ending(decision)
            raise Stop(S.UNCORDONING, decision.reason)
        purpose = "gsp/driver mismatch" if claim.kind == REMEDY else "rollout"
        try:
            await self.scheduler.cordon(claim.node_id, f"lockstep {purpose} {claim.rollout_id}")
        except ForeignDrain as exc:
            # Skipped: counted failed in the wave's result, but the node's running firmware
            # did not change, so no device.failed for the gate to blame the image for.
            progress["skipped"] = True
            raise Stop(S.FAILED, f"left untouched: {exc}") from None
        await self._keep_cordon_only_if_held(claim)
        state = await self.scheduler.drain_state(claim.node_id)
        if state is DrainState.DRAINED:
            await self._commit(
                claim, S.IN_BAND if claim.kind == REMEDY else S.ACTIVATING, "", progress
            )
        elif state is DrainState.NOT_DRAINED:
            raise Stop(S.FAILED, "the node was resumed by someone else while draining")
        elif time.time() - float(progress.get("cordoned_at", time.time())) > (
            self.policy.drain_deadline_s
        ):
            # Skipped (reliability.md E1/E2): given back, and counted failed in the wave's
            # result, but nothing on the node changed, so no device.failed for the gate to
            # blame the image for.
            progress["ending"] = S.FAILED.value
            progress["skipped"] = True
            why = None
            if isinstance(self.scheduler, ExplainsDrain):
                why = self.scheduler.drain_blocker(claim.node_id)
            reason = f"skipped: not drained within {self.policy.drain_deadline_s:g}s"
            raise Stop(S.UNCORDONING, f"{reason}: {why}" if why else reason)
        else:
            await self._commit(claim, S.DRAINING, "draining", progress, self.policy.drain_poll_s)

    async def _keep_cordon_only_if_held(self, claim: Claim) -> None:
        """A cordon sent by a worker whose lease lapsed meanwhile may take effect after
        another claim moved the item on, even after that claim gave the node back: it would
        stay cordoned by Lockstep with nothing left to release it (found by the chaos test).
        Under the item's lock (its next move waits), the stale worker gives its cordon back
        unless the item still keeps the node out of service; then it stops."""
        async with self.store.transaction() as tx:
            if await tx.still_holds(claim, self.policy.lease_s):
                return
            step = await tx.step_now(claim)
            if step not in KEEPS_CORDON:
                await self.scheduler.resume(claim.node_id)
        raise LostClaim

    async def _activating(
        self, claim: Claim, node: FleetNode, progress: dict[str, Any], started: float
    ) -> None:
        events: list[tuple[DeviceOutcome, EventData]] = []
        async with self.store.transaction() as tx:
            target = await tx.target(claim.rollout_id)
        if target is None:
            raise Stop(S.QUARANTINED, "the plan's attested bundle is no longer known")
        plans = progress["components"]
        staged = [n for n, p in plans.items() if not p["done"] and p["banks"] == "ab"]
        if staged and not progress.get("activate_sent"):
            decision = await self._check(
                claim, node, takes_out=False, progress_mark=progress, mark="activate_sent"
            )
            if decision.verdict is not Verdict.PROCEED:
                progress["ending"] = _ending(decision)
                raise Stop(S.UNCORDONING, decision.reason)
            paths = tuple(t for n in staged for t in plans[n]["targets"])
            async with self._session(node) as bmc:
                update = FirmwareUpdate(bmc, self.policy.update)
                try:
                    if progress.get("rollback"):
                        refs = await update.switch_bank(paths)
                    else:
                        refs = await update.activate(paths)
                except BmcUnavailable:
                    raise
                except BmcError as exc:
                    raise Stop(S.QUARANTINED, f"activate: {exc}") from None
                # Followed in turns, as a staging task: recorded before the first poll.
                progress["activations"] = [[r.monitor, r.task] for r in refs]
                progress["activated_at"] = time.time()
                await self._save(claim, progress)
        if progress.get("activations"):
            await self._follow_activations(claim, node, progress)
        events += [
            (DeviceOutcome.ACTIVATED, self._device(DeviceActivated, claim, n, plans[n], started))
            for n in staged
            if not progress.get("rollback")  # its outcome is device.rolled_back, once read back
        ]
        # One-way parts have no inactive bank: the write is the activation, so it waits for
        # the drained node (seed 000: PSU/BBU power firmware).
        for name, plan in plans.items():
            if plan["done"] or plan["banks"] == "ab" or plan.get("staged"):
                continue
            await self._push(claim, node, target, name, plan, progress, stage=False)
            plan["staged"] = True
            events.append(
                (DeviceOutcome.ACTIVATED, self._device(DeviceActivated, claim, name, plan, started))
            )
        await self._commit(claim, S.AWAITING_BMC, "", progress, events=events)

    async def _awaiting_bmc(self, claim: Claim, node: FleetNode, progress: dict[str, Any]) -> None:
        """A BMC may reset after an activation and refuse even a login for minutes
        (reliability.md 7.D2): it is tried once per turn; a BMC that does not answer is waited
        for up to ``reachable_s`` (``_retry_or_give_up``), then the node is quarantined."""
        async with self._session(node) as bmc:
            await bmc.get("/redfish/v1/")
        await self._commit(claim, S.VERIFYING, "", progress)

    async def _verifying(
        self, claim: Claim, node: FleetNode, progress: dict[str, Any], started: float
    ) -> None:
        events: list[tuple[DeviceOutcome, EventData]] = []
        async with self._session(node) as bmc:
            update = FirmwareUpdate(bmc, self.policy.update)
            for name, plan in progress["components"].items():
                if plan["done"]:
                    continue
                request = UpdateRequest(tuple(plan["targets"]), plan["version"])
                try:
                    await update.verify(request, plan["before"])
                except BmcUnavailable:
                    raise
                except BmcError as exc:
                    raise Stop(S.QUARANTINED, f"{name}: {exc}") from None
                plan["done"] = True
                if progress.get("rollback"):
                    before = [v for v in plan["before"].values() if v]
                    rolled = DeviceRolledBack(
                        rollout_id=claim.rollout_id,
                        node_id=claim.node_id,
                        component=Component(name),
                        from_version=before[0] if before else None,
                        to_version=plan["version"],
                        duration_s=round(time.monotonic() - started, 3),
                        reason=f"gate tripped on wave {claim.wave}",
                    )
                    events.append((DeviceOutcome.ROLLED_BACK, rolled))
                    continue
                events.append(
                    (
                        DeviceOutcome.VERIFIED,
                        self._device(DeviceVerified, claim, name, plan, started),
                    )
                )
        progress["ending"] = S.DONE.value
        after = S.IN_BAND if progress.get("in_band") else S.UNCORDONING
        await self._commit(claim, after, "", progress, events=events)

    async def _uncordoning(self, claim: Claim, progress: dict[str, Any]) -> None:
        resumed = await self.scheduler.resume(claim.node_id)
        ending = NodeStep(progress.get("ending", S.DONE.value))
        reason = progress.get("ending_reason", "")
        note = "" if resumed else "; no drain of Lockstep's to undo"
        await self._commit(claim, ending, f"{reason}{note}".strip("; "), progress)

    # -- the push, sent at most once --------------------------------------------------------

    async def _push(
        self,
        claim: Claim,
        node: FleetNode,
        target: Target,
        name: str,
        plan: dict[str, Any],
        progress: dict[str, Any],
        *,
        stage: bool,
    ) -> None:
        request = UpdateRequest(tuple(plan["targets"]), plan["version"], stage=stage)
        async with self._session(node) as bmc:
            update = FirmwareUpdate(bmc, self.policy.update)
            if plan["sent"]:
                await self._after_unknown_push(update, claim, name, plan, request)
                return
            entry = self._entry(target, node, name)
            image = self._image(target, entry)  # fetched and re-hashed right before the push
            try:
                checked = await update.preflight(image, request)
            except BmcUnavailable:
                raise
            except (BmcError, ImageDigestMismatch) as exc:
                raise Stop(self._failure_end(claim), f"{name}: {exc}") from None
            if not checked.pending:
                plan["done"] = True  # the device runs it already: nothing to write
                return
            plan["sent"] = True
            decision = await self._check(claim, node, takes_out=not stage, progress_mark=progress)
            if decision.verdict is not Verdict.PROCEED:
                plan["sent"] = False
            self._stop_unless_proceed(claim, decision)
            try:
                ref = await update.push(image, request, checked, server=self.image_server)
            except ImageDigestMismatch as exc:
                plan["sent"] = False  # checked right before sending: nothing left this host
                raise Stop(self._failure_end(claim), f"{name}: {exc}") from None
            except PushOutcomeUnknown as exc:
                raise Stop(self._failure_end(claim), f"{name}: {exc}; not sent again") from None
            except BmcUnavailable:
                plan["sent"] = False  # the BMC cannot have taken it (transport.NOT_TAKEN)
                await self._save(claim, progress)
                raise
            except BmcError as exc:
                raise Stop(self._failure_end(claim), f"{name}: {exc}") from None
            plan["task"] = {"monitor": ref.monitor, "task": ref.task, "since": time.time()}
            await self._save(claim, progress)
            if checked.method is Method.MULTIPART:
                # The image went with the request: the task can be followed in turns.
                await self._follow(update, claim, name, plan)
                return
            try:  # the BMC pulls the image while its task runs: it stays offered until then
                await self._wait(update, claim, name, ref)
            finally:
                if self.image_server is not None:
                    self.image_server.withdraw(image)

    async def _follow(
        self, update: FirmwareUpdate, claim: Claim, name: str, plan: dict[str, Any]
    ) -> None:
        """One turn of following the push's recorded task; :class:`NotYet` while it
        runs after ``task_hold_s`` (the deadline counts from the push: ``since``)."""
        task = plan["task"]
        ref = TaskRef(task["monitor"], task["task"])
        waited = max(0.0, time.time() - float(task.get("since", time.time())))
        try:
            outcome = await update.follow(ref, hold_s=self.policy.task_hold_s, waited_s=waited)
        except BmcUnavailable:
            raise  # TaskUnreachable: accepted; the next run follows the recorded task
        except BmcError as exc:
            raise Stop(self._failure_end(claim), f"{name}: {exc}") from None
        if outcome is None:
            raise NotYet(f"{name}: the BMC's task is still running")

    async def _follow_activations(
        self, claim: Claim, node: FleetNode, progress: dict[str, Any]
    ) -> None:
        """One turn of following the activation's recorded tasks; each that ended is struck
        off; :class:`NotYet` while one still runs (the deadline counts from the activation)."""
        since = float(progress.get("activated_at", time.time()))
        async with self._session(node) as bmc:
            update = FirmwareUpdate(bmc, self.policy.update)
            while progress["activations"]:
                monitor, task = progress["activations"][0]
                waited = max(0.0, time.time() - since)
                try:
                    outcome = await update.follow(
                        TaskRef(monitor, task), hold_s=self.policy.task_hold_s, waited_s=waited
                    )
                except BmcUnavailable:
                    raise
                except BmcError as exc:
                    raise Stop(S.QUARANTINED, f"activate: {exc}") from None
                if outcome is None:
                    raise NotYet("activate: the BMC's task is still running")
                progress["activations"].pop(0)
                if progress["activations"]:  # the last is committed with the step's end
                    await self._save(claim, progress)

    async def _after_unknown_push(
        self,
        update: FirmwareUpdate,
        claim: Claim,
        name: str,
        plan: dict[str, Any],
        request: UpdateRequest,
    ) -> None:
        """A push recorded as sent by an earlier run: follow its task, or read the members;
        never send it again."""
        if plan.get("task"):
            await self._follow(update, claim, name, plan)
        # Without a recorded task, the members tell: the image shows as staged (or running)
        # once the BMC's task ends, so they are read until then (at most ``settle_s``).
        started = update.clock()
        while True:
            members = await update.members(request.targets)
            if all(_holds(m.item, request) for m in members.values()):
                return
            if update.clock() - started >= self.policy.update.settle_s:
                break
            await update.sleep(self.policy.update.read_poll_s)
        raise Stop(
            S.FAILED,
            f"{name}: a push may have been accepted but the members show "
            "no staged image; not sent again",
        )

    async def _wait(self, update: FirmwareUpdate, claim: Claim, name: str, ref: TaskRef) -> None:
        try:
            await update.wait(ref)
        except BmcUnavailable:
            raise  # TaskUnreachable: accepted; the next run follows the recorded task
        except BmcError as exc:
            raise Stop(self._failure_end(claim), f"{name}: {exc}") from None

    # -- helpers ---------------------------------------------------------------------------

    async def _retry_or_give_up(
        self, claim: Claim, progress: dict[str, Any], exc: Exception
    ) -> None:
        """Nothing was decided: run the step again after a pause, up to ``max_errors`` times
        in a row; then the node ends with the last error as its reason. Giving a node back
        (uncordoning) is never given up: a node must not stay cordoned by Lockstep."""
        if isinstance(exc, BmcUnavailable) and _waits_on_device(claim.state, progress):
            # Something was accepted and the BMC may be resetting: it is given time, not tries
            # (a login refused every retry_s would spend max_errors in well under a minute).
            since = float(progress.setdefault("dark_since", time.time()))
            limit = self.policy.update.reachable_s
            if time.time() - since >= limit:
                reason = f"the BMC did not come back within {limit:g}s: {exc}"
                await self._end(claim, self._failure_end(claim), reason, progress)
                return
            reason = f"waiting for the BMC: {exc}"
            await self._commit(claim, claim.state, reason, progress, self.policy.retry_s)
            return
        errors = progress.setdefault("errors", {})
        count = errors[claim.state.value] = int(errors.get(claim.state.value, 0)) + 1
        if count > self.policy.max_errors and claim.state is not S.UNCORDONING:
            reason = f"gave up after {count - 1} retries: {exc}"
            await self._end(claim, self._failure_end(claim), reason, progress)
            return
        await self._commit(claim, claim.state, f"retrying: {exc}", progress, self.policy.retry_s)

    async def _wait_for_inventory(
        self, claim: Claim, progress: dict[str, Any], exc: InventoryUnavailable
    ) -> None:
        """The inventory did not answer for the node: the control plane, not the node, is at
        fault, and nothing was sent (the node is read before every step). The node waits in its
        step, however long (the stuck-step alert sees it), instead of spending ``max_errors``
        and failing into its wave's failure budget; and the wait doubles, with jitter, so that
        a whole wave of askers does not keep an overloaded inventory overloaded (at 12,500
        nodes a retry every ``retry_s`` against a slow inventory was a congestion collapse)."""
        waits = int(progress.get("inventory_waits", 0))
        progress["inventory_waits"] = waits + 1
        ceiling = min(self.policy.retry_s * 2**waits, self.policy.inventory_backoff_max_s)
        pause = _JITTER.uniform(ceiling / 2, ceiling)
        await self._commit(claim, claim.state, f"waiting for the inventory: {exc}", progress, pause)

    async def _node(self, claim: Claim) -> FleetNode:
        """The node as the inventory knows it now (re-read before every step)."""
        node = await self.facts.node(claim.node_id)
        if node is None:
            raise Stop(self._failure_end(claim), "the inventory does not know this node")
        self.credentials.learn(node)
        return node

    def _session(self, node: FleetNode) -> BmcSession:
        return self.client.session(
            BmcTarget(node.node_id, node.bmc_url, allow_plain_http=node.allow_plain_http)
        )

    def _entry(self, target: Target, node: FleetNode, name: str) -> AttestedComponent:
        for entry in target.components:
            if entry.profile == node.profile and entry.component.value == name:
                return entry
        raise Stop(S.FAILED, f"the attested bundle has no {name} image for profile {node.profile}")

    def _image(self, target: Target, entry: AttestedComponent) -> FirmwareImage:
        """The image's bytes from the attested bundle, hashed now against the manifest's
        SHA-384 (design.md non-negotiable 7: a mismatch fails closed)."""
        if target.bundle_uri is None:
            raise Stop(S.FAILED, "bundle.attested named no bundle location")
        try:
            data = self.images.read(target.bundle_uri, entry.image)
        except (OSError, ValueError) as exc:
            raise Stop(S.FAILED, f"{entry.image}: cannot read from the bundle: {exc}") from None
        actual = sha384_of(data)
        if actual != entry.sha384 or len(data) != entry.size:
            raise Stop(
                S.FAILED,
                f"{entry.image}: SHA-384 {actual} ({len(data)} bytes) is not "
                f"the attested {entry.sha384} ({entry.size} bytes); nothing was sent",
            )
        name = entry.image.rsplit("/", 1)[-1]
        # The attested digest itself: the re-hash before each push is against the manifest.
        return FirmwareImage(data, entry.sha384, name)

    def _failure_end(self, claim: Claim) -> NodeStep:
        return S.QUARANTINED if claim.state in CHANGED else S.FAILED

    def _stop_unless_proceed(self, claim: Claim, decision: Decision) -> None:
        if decision.verdict is Verdict.PROCEED:
            return
        if decision.verdict is Verdict.REFUSE:
            raise Stop(S.FAILED, f"refused: {decision.reason}")
        raise Stop(S.CANCELLED, decision.reason)

    async def _check(
        self,
        claim: Claim,
        node: FleetNode,
        *,
        takes_out: bool,
        progress_mark: dict[str, Any] | None = None,
        mark: str | None = None,
        starts_work: bool = False,
    ) -> Decision:
        """The fence and the blast-radius check; on PROCEED, ``progress_mark`` (with ``mark``
        set) commits with the check, before the action it announces is sent."""
        async with self.store.transaction() as tx:
            if not await tx.still_holds(claim, self.policy.lease_s):
                raise LostClaim
            decision = await self._decide(
                tx, claim, node, takes_out=takes_out, starts_work=starts_work
            )
            if decision.verdict is Verdict.PROCEED and progress_mark is not None:
                if mark is not None:
                    progress_mark[mark] = True
                await tx.save_progress(claim, progress_mark)
        return decision

    async def _check_in_band(
        self, claim: Claim, node: FleetNode, *, progress_mark: dict[str, Any], mark: str
    ) -> Decision:
        """The check before an in-band call: the node is drained already (no budget asked)."""
        return await self._check(
            claim, node, takes_out=False, progress_mark=progress_mark, mark=mark
        )

    async def _decide(
        self,
        tx: UpdaterTx,
        claim: Claim,
        node: FleetNode,
        *,
        takes_out: bool,
        starts_work: bool = False,
    ) -> Decision:
        """The blast-radius check for the item's kind: a rollout's own rules, or for a GSP
        remedy (no rollout) the node's other work and its pool (``decide_remedy``). Where the
        action begins a rollout node's work, its pool's and site's maintenance windows too."""
        if claim.kind == REMEDY:
            return decide_remedy(
                await tx.remedy_facts(claim, node.pool),
                budget=self.policy.remedy_max_unavailable,
                takes_out_of_service=takes_out,
            )
        facts = await tx.facts(claim, node.pool)
        if starts_work:
            declared = await tx.maintenance(node.pool, node.site)
            facts = dataclasses.replace(facts, window_closed=closed(declared, self.clock()))
        return decide(
            facts,
            takes_out_of_service=takes_out,
            rollback=claim.kind == ROLLBACK,
            starts_work=starts_work,
        )

    async def _save(self, claim: Claim, progress: dict[str, Any]) -> None:
        async with self.store.transaction() as tx:
            if not await tx.still_holds(claim, self.policy.lease_s):
                raise LostClaim
            await tx.save_progress(claim, progress)

    def _device(
        self,
        kind: type[DeviceStaged] | type[DeviceActivated] | type[DeviceVerified],
        claim: Claim,
        name: str,
        plan: dict[str, Any],
        started: float,
    ) -> EventData:
        before = [v for v in plan["before"].values() if v]
        return kind(
            rollout_id=claim.rollout_id,
            node_id=claim.node_id,
            component=Component(name),
            from_version=before[0] if before else None,
            to_version=plan["version"],
            duration_s=round(time.monotonic() - started, 3),
        )

    async def _end(
        self, claim: Claim, target: NodeStep, reason: str, progress: dict[str, Any]
    ) -> None:
        events: list[tuple[DeviceOutcome, EventData]] = []
        if claim.state is S.DRAINING and target in {S.FAILED, S.CANCELLED}:
            # Cordoned, maybe: give back what is Lockstep's (a foreign drain stays as it was).
            progress["ending"], target = target.value, S.UNCORDONING
        elif claim.state in CHANGED and target is S.FAILED:
            target = S.QUARANTINED
        elif claim.state in CHANGED and target is S.CANCELLED:
            progress["ending"], target = S.CANCELLED.value, S.UNCORDONING
        if target is S.UNCORDONING:
            progress["ending_reason"] = reason
        failed = target in {S.FAILED, S.QUARANTINED} or progress.get("ending") == S.FAILED.value
        if failed and not progress.get("skipped"):
            step = claim.state.value
            for name, plan in progress.get("components", {}).items():
                if plan.get("done"):
                    continue
                before = [v for v in plan["before"].values() if v]
                events.append(
                    (
                        DeviceOutcome.FAILED,
                        DeviceFailed(
                            rollout_id=claim.rollout_id,
                            node_id=claim.node_id,
                            component=Component(name),
                            from_version=before[0] if before else None,
                            to_version=plan["version"],
                            step=step,
                            reason=clip_text(reason),
                        ),
                    )
                )
        await self._commit(claim, target, reason, progress, events=events)

    async def _commit(
        self,
        claim: Claim,
        target: NodeStep,
        reason: str,
        progress: dict[str, Any],
        retry_in_s: float = 0.0,
        *,
        parked: bool = False,
        events: Sequence[tuple[DeviceOutcome, EventData]] = (),
    ) -> None:
        if target is not claim.state:
            progress.pop("errors", None)  # the step succeeded: its retry count starts over
            progress.pop("dark_since", None)
        async with self.store.transaction() as tx:
            if not await tx.still_holds(claim, self.policy.lease_s):
                raise LostClaim
            kept = await tx.advance(
                claim,
                target,
                reason=clip_text(reason),
                progress=progress,
                retry_in_s=retry_in_s,
                parked=parked,
                keep_lease_s=self.policy.lease_s if self.chains() else None,
            )
            for outcome, data in events:
                tx.events.emit(
                    subjects.device(outcome, claim.rollout_id, claim.node_id),
                    data,
                    correlation_id=claim.correlation_id,
                )
            if target in TERMINAL:
                result = await tx.complete_wave(claim.rollout_id, claim.wave)
                if result is not None:
                    env = tx.events.emit(
                        subjects.wave_completed(result.rollout_id),
                        WaveCompleted(
                            rollout_id=result.rollout_id,
                            wave=result.wave,
                            succeeded=result.succeeded,
                            failed=result.failed,
                        ),
                        correlation_id=result.correlation_id,
                    )
                    # Kept for a re-drive if the broker loses it (``redrive_completions``).
                    await tx.completion_sent(result.rollout_id, result.wave, env.event_id)
        if kept is not None:  # committed: the next step is this worker's
            self._kept[(claim.id, claim.token)] = kept
        log.info("%s: %s -> %s %s", claim.node_id, claim.state.value, target.value, reason)


def _waits_on_device(state: NodeStep, progress: dict[str, Any]) -> bool:
    """The step follows something a BMC accepted (a push, an activation) or waits for a BMC
    to come back after one: a BMC that does not answer is then waited for, not retried."""
    if state is S.AWAITING_BMC:
        return True
    if state is S.ACTIVATING and progress.get("activate_sent"):
        return True
    plans = progress.get("components", {}).values()
    return state in (S.STAGING, S.ACTIVATING) and any(
        p.get("sent") and not p.get("done") for p in plans
    )


def _ending(decision: Decision) -> str:
    """How a node the guard stopped after its cordon ends, once given back."""
    return (S.FAILED if decision.verdict is Verdict.REFUSE else S.CANCELLED).value


def _holds(item: UpdatableSoftware, request: UpdateRequest) -> bool:
    """The member holds the pushed image: staged, or already running it."""
    return bool(item.Staged) or item.Version == request.version
