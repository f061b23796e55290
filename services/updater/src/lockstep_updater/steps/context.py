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
from lockstep_redfish import BmcTarget, RedfishClient, RetryPolicy
from lockstep_redfish.image import FirmwareImage
from lockstep_redfish.image_server import ImageServer
from lockstep_redfish.session import BmcSession
from lockstep_redfish.update import UpdatePolicy
from lockstep_updater.adapters.credentials import FleetCredentials
from lockstep_updater.domain.guard import Decision, Verdict, decide, decide_remedy
from lockstep_updater.domain.progress import ComponentPlan, FirmwareProgress, Progress, document
from lockstep_updater.domain.steps import TERMINAL, NodeStep
from lockstep_updater.domain.windows import closed
from lockstep_updater.ports import Images, NodeAgent, NodeFacts, Scheduler
from lockstep_updater.store import REMEDY, ROLLBACK, Claim, Target, UpdaterStore, UpdaterTx

log = logging.getLogger(__name__)
S = NodeStep
Events = list[tuple[DeviceOutcome, EventData]]
CHANGED = frozenset({S.ACTIVATING, S.AWAITING_BMC, S.VERIFYING, S.IN_BAND})
"""Steps after which the running firmware may have changed: a failure quarantines the node."""
KEEPS_CORDON = frozenset({S.DRAINING, *CHANGED, S.QUARANTINED})
"""Steps in which the node must stay cordoned (uncordoning gives it back, once, itself)."""


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


def _always() -> bool:
    return True


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
    chains: Callable[[], bool] = _always
    """Whether a commit that moved its item on keeps it for the next step (see ``commit``)."""
    kept: dict[tuple[int, int], Claim] = field(default_factory=dict)
    """The claims ``commit`` kept, by the (item, token) of the claim that ran the step."""
    client: RedfishClient = field(init=False)

    def __post_init__(self) -> None:
        self.client = RedfishClient(self.credentials, self.policy.transport)

    def wall(self) -> float:
        """The wall clock in epoch seconds: what the progress records (read across processes)."""
        return self.clock.now().timestamp()

    # -- reads -----------------------------------------------------------------------------

    async def node(self, claim: Claim) -> FleetNode:
        """The node as the inventory knows it now (re-read before every step)."""
        node = await self.facts.node(claim.node_id)
        if node is None:
            raise Stop(failure_end(claim), "the inventory does not know this node")
        self.credentials.learn(node)
        return node

    async def target(self, claim: Claim) -> Target | None:
        async with self.store.transaction() as tx:
            return await tx.target(claim.rollout_id)

    def session(self, node: FleetNode) -> BmcSession:
        return self.client.session(
            BmcTarget(node.node_id, node.bmc_url, allow_plain_http=node.allow_plain_http)
        )

    def image(self, target: Target, entry: AttestedComponent) -> FirmwareImage:
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
        check, before it is sent."""
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
        if kept is not None:  # committed: the next step is this worker's
            self.kept[(claim.id, claim.token)] = kept
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


def first_before(plan: ComponentPlan) -> str | None:
    """The version a component ran before (the first member's that was read)."""
    before = [v for v in plan.before.values() if v]
    return before[0] if before else None


def failure_end(claim: Claim) -> NodeStep:
    """Where a failure of the claimed step ends the node."""
    return S.QUARANTINED if claim.state in CHANGED else S.FAILED


def stop_unless_proceed(decision: Decision) -> None:
    """A guard's verdict other than PROCEED ends the step (refused: failed; else cancelled)."""
    if decision.verdict is Verdict.PROCEED:
        return
    if decision.verdict is Verdict.REFUSE:
        raise Stop(S.FAILED, f"refused: {decision.reason}")
    raise Stop(S.CANCELLED, decision.reason)


def ending(decision: Decision) -> NodeStep:
    """How a node the guard stopped after its cordon ends, once given back."""
    return S.FAILED if decision.verdict is Verdict.REFUSE else S.CANCELLED


def entry_for(target: Target, node: FleetNode, name: str) -> AttestedComponent:
    """The attested bundle's image of component ``name`` for the node's profile."""
    for entry in target.components:
        if entry.profile == node.profile and entry.component.value == name:
            return entry
    raise Stop(S.FAILED, f"the attested bundle has no {name} image for profile {node.profile}")
