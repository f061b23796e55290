"""What a step may use, and nothing more: :class:`StepContext` (issue 28 item 1).

A step reads the node, the attested bundle and the BMC through it, checks the fence and the
blast-radius guard right before a mutating call (``check``), records within the step (``save``)
and ends the step (``commit``: the next state, its history row and its ``device.*`` events in
one transaction; ``end`` for an ending). Time comes from its ``clock`` only. A step never calls
back into the executor: the executor builds one context, looks the claimed step up in
``steps.STEPS`` and runs it with the context.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Literal

from lockstep_common import subjects
from lockstep_common.clock import SYSTEM_CLOCK, Clock
from lockstep_common.envelope import EventData
from lockstep_common.events.v1 import (
    AttestedComponent,
    DeviceActivated,
    DeviceFailed,
    DeviceStaged,
    DeviceVerified,
    FleetNode,
    WaveCompleted,
)
from lockstep_common.vocabulary import Component, DeviceOutcome, clip_text
from lockstep_redfish import RedfishClient
from lockstep_redfish.image import FirmwareImage, off_loop
from lockstep_redfish.image_server import ImageServer
from lockstep_updater.adapters.credentials import FleetCredentials
from lockstep_updater.adapters.wave_facts import read_node
from lockstep_updater.domain.guard import Decision, Verdict, decide, decide_remedy
from lockstep_updater.domain.progress import (
    ComponentPlan,
    FirmwareProgress,
    Progress,
    document,
    load,
)
from lockstep_updater.domain.steps import TERMINAL, NodeStep
from lockstep_updater.domain.windows import closed
from lockstep_updater.ports import Images, NodeAgent, NodeFacts, Scheduler
from lockstep_updater.steps.bmc_sessions import KeptSession, NodeSessions, bmc_target
from lockstep_updater.steps.ends import CHANGED, KEEPS_CORDON, LostClaim, Stop, failure_end
from lockstep_updater.steps.lease_fence import renewed
from lockstep_updater.steps.plans import first_before
from lockstep_updater.steps.policy import ExecutorPolicy
from lockstep_updater.store import REMEDY, ROLLBACK, UPDATE, Claim, Target, UpdaterStore, UpdaterTx
from lockstep_updater.store import one_statement as one_read

log = logging.getLogger(__name__)
S = NodeStep
Events = list[tuple[DeviceOutcome, EventData]]
BorrowedSession = AbstractAsyncContextManager[KeptSession]


@dataclass(slots=True)
class InBandChannel:
    """The node agent's in-band channel (driver package unit, the GSP runbook) and its bounds."""

    agent: NodeAgent | None = None
    """None: a node with in-band work fails with that reason."""
    reboot_deadline_s: float = 1800.0
    """A node rebooting (the agent silent, or answering "rebooting") is polled every
    ``retry_s`` without counting as a failed try, up to this; then it is quarantined."""


def sha384_of(data: bytes) -> str:
    return hashlib.sha384(data).hexdigest()


@dataclass(slots=True)
class StepContext:
    """Everything a step may use (see the module docstring)."""

    store: UpdaterStore
    facts: NodeFacts
    scheduler: Scheduler
    images: Images
    policy: ExecutorPolicy
    credentials: FleetCredentials
    clock: Clock = SYSTEM_CLOCK
    image_server: ImageServer | None = None
    """Where a BMC without a multipart push URI pulls images from; None: such a push fails."""
    in_band: InBandChannel = field(default_factory=InBandChannel)
    chains: Callable[[], bool] = lambda: True
    """Whether a commit that moved its item on keeps it for the next step (see ``commit``)."""
    kept: dict[tuple[int, int], Claim] = field(default_factory=dict)
    """The claims ``commit`` kept, by the (item, token) of the claim that ran the step."""
    client: RedfishClient = field(init=False)
    sessions: NodeSessions = field(init=False)
    """Each node's one Redfish session for its whole update (``steps.bmc_sessions``)."""

    def __post_init__(self) -> None:
        self.client = RedfishClient(self.credentials, self.policy.transport)
        self.sessions = NodeSessions(self.client, limit=self.policy.bmc_sessions_max)

    def wall(self) -> float:
        """The wall clock in epoch seconds: what the progress records (read across processes)."""
        return self.clock.now().timestamp()

    # -- reads -----------------------------------------------------------------------------

    async def node(self, claim: Claim) -> FleetNode:
        """The node as the inventory knows it now, before every step (``read_node``: from its
        wave's copy, no older than its registry entry)."""
        node = await read_node(self.store, self.facts, claim)
        if node is None:
            raise Stop(failure_end(claim), "the inventory does not know this node")
        self.credentials.learn(node)
        return node

    async def target(self, claim: Claim) -> Target | None:
        """The attested bundle the item's rollout moves its nodes to, None while unknown."""
        async with one_read(self.store) as tx:
            return await tx.target(claim.rollout_id)

    async def attested(
        self, node: FleetNode, component: Component, version: str
    ) -> tuple[Target, AttestedComponent] | None:
        """The latest attested bundle naming ``component`` at ``version`` for the node's
        profile, with that entry; None when no bundle does."""
        async with one_read(self.store) as tx:
            return await tx.attested(node.profile, component.value, version)

    async def approved_reflash(self, claim: Claim) -> frozenset[str]:
        """The components the approved plan lets a flip-back of the claim's wave re-flash
        (``wave.planned`` ``reflash``; a forced downgrade needs the approver's signature)."""
        async with one_read(self.store) as tx:
            return await tx.reflash(claim.rollout_id, claim.wave)

    async def update_item(self, claim: Claim) -> tuple[NodeStep, Progress] | None:
        """The state and progress of the node's update item in the claim's rollout, if any."""
        async with one_read(self.store) as tx:
            found = await tx.update_item(claim.rollout_id, claim.node_id)
        return None if found is None else (found[0], load(UPDATE, found[1]))

    def session(self, node: FleetNode, progress: Progress | None = None) -> BorrowedSession:
        """The node's Redfish session, borrowed for a block: logged in on the node's first
        step (as ``progress`` records, ``bmc_target``), kept after it (logged out when the
        item ends or its claim is lost)."""
        return self.sessions.borrow(bmc_target(node, progress))

    async def image(self, target: Target, entry: AttestedComponent) -> FirmwareImage:
        """The image's bytes from the attested bundle, hashed now against the manifest's
        SHA-384 (design.md non-negotiable 7: a mismatch fails closed), off the event loop
        (``off_loop``: a large image's hash would hold up every other BMC's requests)."""
        if target.bundle_uri is None:
            raise Stop(S.FAILED, "bundle.attested named no bundle location")
        try:
            data = self.images.read(target.bundle_uri, entry.image)
        except (OSError, ValueError) as exc:
            raise Stop(S.FAILED, f"{entry.image}: cannot read from the bundle: {exc}") from None
        name = entry.image.rsplit("/", 1)[-1]
        # The attested digest itself: the check before each push is against the manifest. The
        # bytes are hashed here, once: the step's preflight and push send this very object
        # and compare this digest again (``FirmwareImage.actual``), not hash it twice more.
        image = FirmwareImage(data, entry.sha384, name)
        await off_loop(image.actual)
        actual = image.actual()  # the digest just computed
        if actual != entry.sha384 or len(data) != entry.size:
            raise Stop(
                S.FAILED,
                f"{entry.image}: SHA-384 {actual} ({len(data)} bytes) is not "
                f"the attested {entry.sha384} ({entry.size} bytes); nothing was sent",
            )
        return image

    # -- the fence and the guard -----------------------------------------------------------

    async def check(
        self,
        claim: Claim,
        node: FleetNode,
        *,
        takes_out: bool,
        progress: Progress | None = None,
        mark: Literal["activate_sent", "in_band_sent"] | None = None,
        starts_work: bool = False,
    ) -> Decision:
        """The fence and the blast-radius check; on PROCEED, ``progress`` (with what the
        caller is about to send marked in it, and the flag ``mark`` set) commits with the
        check, before it is sent; the send is fenced again by this process's clock."""
        since = self.clock.monotonic()  # before the transaction: the lease runs from it
        async with self.store.transaction() as tx:
            if not await tx.still_holds(claim, self.policy.lease_s):
                raise LostClaim
            decision = await self.decide(
                tx, claim, node, takes_out=takes_out, starts_work=starts_work
            )
            if decision.verdict is Verdict.PROCEED and progress is not None:
                if mark is not None:
                    setattr(progress, mark, True)
                await tx.save_progress(claim, document(progress))
        renewed(since)  # steps.lease_fence
        return decision

    async def decide(
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
            facts = dataclasses.replace(facts, window_closed=closed(declared, self.clock.now()))
        return decide(
            facts,
            takes_out_of_service=takes_out,
            rollback=claim.kind == ROLLBACK,
            starts_work=starts_work,
        )

    async def take_out(self, claim: Claim, node: FleetNode, progress: Progress) -> Decision:
        """The pool's out-of-service budget checked and, in the same transaction under the
        pool's lock, the item moved on: to draining on PROCEED (two workers cannot both take
        the pool's last place), or parked in cordoning on WAIT until a place frees or the
        per-pool sweep wakes it (``Executor.sweep_parked``). One transaction where a wait took
        two: at 12,500 nodes most of a wave's nodes wait here, some many times."""
        async with self.store.transaction() as tx:
            if not await tx.still_holds(claim, self.policy.lease_s):
                raise LostClaim
            decision = await self.decide(tx, claim, node, takes_out=True, starts_work=True)
            if decision.verdict is Verdict.PROCEED:
                progress.cordoned_at = self.wall()
                await tx.advance(claim, S.DRAINING, progress=document(progress))
            elif decision.verdict is Verdict.WAIT:
                await tx.advance(
                    claim,
                    S.CORDONING,
                    reason=clip_text(decision.reason),
                    progress=document(progress),
                    retry_in_s=self.policy.parked_net_s,
                    parked=True,
                )
        if decision.verdict is Verdict.WAIT:
            log.info("%s: parked in cordoning: %s", claim.node_id, decision.reason)
        return decision

    async def keep_cordon_only_if_held(self, claim: Claim) -> None:
        """After a cordon: a cordon sent by a worker whose lease lapsed meanwhile may take
        effect after another claim moved the item on, even after that claim gave the node
        back: it would stay cordoned by Lockstep with nothing left to release it (found by
        the chaos test). Under the item's lock (its next move waits), the stale worker gives
        its cordon back unless the item still keeps the node out of service; then it stops
        (:class:`LostClaim`)."""
        async with self.store.transaction() as tx:
            if await tx.still_holds(claim, self.policy.lease_s):
                return
            step = await tx.step_now(claim)
            if step not in KEEPS_CORDON:
                await self.scheduler.resume(claim.node_id)
        raise LostClaim

    # -- writes ----------------------------------------------------------------------------

    async def save(self, claim: Claim, progress: Progress) -> None:
        """Record ``progress`` within the step, while this claim still holds the item."""
        async with self.store.transaction() as tx:
            if not await tx.still_holds(claim, self.policy.lease_s):
                raise LostClaim
            await tx.save_progress(claim, document(progress))

    async def end(self, claim: Claim, target: NodeStep, reason: str, progress: Progress) -> None:
        """End the step in ``target`` the way the step it left requires: a node possibly
        cordoned is given back first, a node whose firmware may have changed is quarantined,
        and each component not verified gets its ``device.failed``."""
        events: Events = []
        if claim.state is S.DRAINING and target in {S.FAILED, S.CANCELLED}:
            # Cordoned, maybe: give back what is Lockstep's (a foreign drain stays as it was).
            progress.ending, target = target, S.UNCORDONING
        elif claim.state in CHANGED and target is S.FAILED:
            target = S.QUARANTINED
        elif claim.state in CHANGED and target is S.CANCELLED:
            progress.ending, target = S.CANCELLED, S.UNCORDONING
        if target is S.UNCORDONING:
            progress.ending_reason = reason
        failed = target in {S.FAILED, S.QUARANTINED} or progress.ending is S.FAILED
        if failed and not progress.skipped and isinstance(progress, FirmwareProgress):
            for name, plan in progress.components.items():
                if plan.done:
                    continue
                failure = DeviceFailed(
                    rollout_id=claim.rollout_id,
                    node_id=claim.node_id,
                    component=Component(name),
                    from_version=first_before(plan),
                    to_version=plan.version,
                    step=claim.state.value,
                    reason=clip_text(reason),
                )
                events.append((DeviceOutcome.FAILED, failure))
        await self.commit(claim, target, reason, progress, events=events)

    async def commit(
        self,
        claim: Claim,
        target: NodeStep,
        reason: str,
        progress: Progress,
        retry_in_s: float = 0.0,
        *,
        parked: bool = False,
        events: Sequence[tuple[DeviceOutcome, EventData]] = (),
    ) -> None:
        """Move the item to ``target`` with its history row, ``events`` and, where its wave
        ended, ``wave.completed``, in one transaction under the fence. Where the move lets
        this claim run the next step (``chains``), the claim kept is left in ``kept``."""
        if target is not claim.state:
            progress.errors = {}  # the step succeeded: its retry count starts over
            progress.dark_since = None
        since = self.clock.monotonic()
        async with self.store.transaction() as tx:
            if not await tx.still_holds(claim, self.policy.lease_s):
                raise LostClaim
            kept = await tx.advance(
                claim,
                target,
                reason=clip_text(reason),
                progress=document(progress),
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
                await _complete_wave(tx, claim)
        if target in TERMINAL:  # the node's update is over: so is its BMC session
            await self.sessions.close(claim.node_id)
        if kept is not None:  # committed: the next step is this worker's
            self.kept[(claim.id, claim.token)] = kept
            renewed(since)  # its lease runs from this transaction (steps.lease_fence)
        log.info("%s: %s -> %s %s", claim.node_id, claim.state.value, target.value, reason)

    # -- events ----------------------------------------------------------------------------

    def device(
        self,
        kind: type[DeviceStaged] | type[DeviceActivated] | type[DeviceVerified],
        claim: Claim,
        name: str,
        plan: ComponentPlan,
        started: float,
    ) -> EventData:
        """The ``device.*`` event of one component's step (``started``: the step's start on
        the monotonic clock)."""
        return kind(
            rollout_id=claim.rollout_id,
            node_id=claim.node_id,
            component=Component(name),
            from_version=first_before(plan),
            to_version=plan.version,
            duration_s=round(self.clock.monotonic() - started, 3),
        )


async def _complete_wave(tx: UpdaterTx, claim: Claim) -> None:
    result = await tx.complete_wave(claim.rollout_id, claim.wave)
    if result is None:
        return
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
    # Kept for a re-drive if the broker loses it (``Executor.redrive_completions``).
    await tx.completion_sent(result.rollout_id, result.wave, env.event_id)
