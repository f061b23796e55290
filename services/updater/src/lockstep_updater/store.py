"""What the updater keeps, behind a small interface: plans, attested images, waves and one
work item per node, with its step history.

Handlers and the worker speak to an :class:`UpdaterStore` only. PostgreSQL implements it in
``adapters/repository.py``; ``testing/memory_store.py`` is an in-memory one with the same
semantics, so handler and worker logic is unit-tested without a database.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, cast

from lockstep_common.events.v1 import AttestedComponent, WavePlanned
from lockstep_common.outbox import EventSink
from lockstep_updater.domain.guard import Facts, RemedyFacts
from lockstep_updater.domain.steps import NodeStep
from lockstep_updater.domain.windows import Declared

UPDATE, ROLLBACK, REMEDY, RELEASE = "update", "rollback", "remedy", "release"
"""The kinds of work item (``node_work.kind``): a rollout's update of a node, its flip-back
after a tripped gate, the GSP / driver runbook started by ``drift.detected`` (no rollout:
its ``rollout_id`` is the remedy's own id, ``domain.remedy.remedy_id``; wave 0), and an
operator's release of a quarantined node (``lockstep node release``; its own id, wave 0)."""


class NotQuarantined(Exception):
    """A release was asked for a node whose latest work item did not end quarantined."""


@dataclass(frozen=True, slots=True)
class Claim:
    """A claimed work item and the fencing token of this claim."""

    id: int
    rollout_id: str
    wave: int
    node_id: str
    state: NodeStep
    token: int
    attempts: int
    components: tuple[str, ...]
    progress: dict[str, Any] = field(default_factory=dict)
    """What earlier steps recorded (targets, versions before, pushes sent, the pool, whether
    Lockstep cordoned the node): what a re-run of a step needs to be safe."""
    correlation_id: str | None = None
    kind: str = UPDATE
    """``update``, or ``rollback``: the flip back to the previous bank after a tripped gate."""


@dataclass(frozen=True, slots=True)
class Target:
    """What a rollout moves its nodes to: the attested bundle and its images."""

    stack_hash: str
    bundle_uri: str | None
    components: tuple[AttestedComponent, ...]


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One step as ``lockstep node history`` shows it."""

    rollout_id: str
    wave: int
    step: str
    attempt: int
    token: int
    started_at: datetime
    ended_at: datetime
    outcome: str
    reason: str


@dataclass(frozen=True, slots=True)
class WaveResult:
    """A wave whose every node reached an end, recorded as completed just now."""

    rollout_id: str
    wave: int
    succeeded: tuple[str, ...]
    failed: tuple[str, ...]
    correlation_id: str | None


@dataclass(frozen=True, slots=True)
class Completion:
    """A completed wave whose ``wave.completed`` the planner has not visibly acted on."""

    rollout_id: str
    wave: int
    event_id: uuid.UUID
    redrives: int


class UpdaterTx(Protocol):
    """One transaction on the store: everything done through it, and every event emitted to
    ``events``, commits together or not at all."""

    @property
    def events(self) -> EventSink:
        """Where events that must commit with this transaction's changes go."""
        ...

    async def record_plan(
        self,
        rollout_id: str,
        stack_hash: str,
        nodes: frozenset[str],
        waves: Mapping[str, int] | None = None,
    ) -> None:
        """Remember the approved plan's nodes and, in ``waves``, the wave each is approved for
        (the first record wins: a plan is not replaced)."""
        ...

    async def plan_waves(self, rollout_id: str) -> dict[str, int]:
        """Node -> its wave in the approved plan; empty when none was recorded with waves."""
        ...

    async def plan_nodes(self, rollout_id: str) -> frozenset[str] | None:
        """The approved plan's nodes, None when no plan was recorded."""
        ...

    async def record_bundle(
        self, stack_hash: str, bundle_uri: str | None, components: tuple[AttestedComponent, ...]
    ) -> None:
        """Remember an attested bundle's images, by stack hash (the latest wins)."""
        ...

    async def target(self, rollout_id: str) -> Target | None:
        """The attested bundle the rollout's plan names, None while either is unknown."""
        ...

    async def attested(
        self, profile: str, component: str, version: str
    ) -> tuple[Target, AttestedComponent] | None:
        """The most recently attested bundle naming ``component`` at ``version`` for
        ``profile``, with that entry; None when no bundle does (an in-band package outside
        any rollout, the GSP runbook's pin or a unit's fallback, is installed only from one)."""
        ...

    async def record_wave(self, wave: WavePlanned, correlation_id: str | None) -> bool:
        """Record a released wave and a ``pending`` item per node, once: False when the wave
        was already recorded (a redelivery adds nothing)."""
        ...

    async def reflash(self, rollout_id: str, wave: int) -> frozenset[str]:
        """The components whose flip-back after a tripped gate the wave's approved plan lets
        re-flash the previous image (``wave.planned`` ``reflash``); empty when none."""
        ...

    async def halt(self, rollout_id: str, reason: str) -> None:
        """Mark the rollout halted (the first reason is kept): no new mutating call starts."""
        ...

    async def request_rollbacks(self, rollout_id: str, wave: int) -> int:
        """A ``rollback`` item in ``pending`` for each update item of the wave (once per node);
        returns how many were added."""
        ...

    async def record_remedy(
        self,
        node_id: str,
        remedy_id: str,
        *,
        held: bool,
        progress: dict[str, Any],
        correlation_id: str | None,
    ) -> bool:
        """Record a GSP runbook item for the node in ``pending`` (held until approved when
        ``held``), unless the node has one that is open or ended failed or quarantined (a
        repeated drift event adds nothing; a node the runbook gave up on waits for a human).
        Returns whether one was added."""
        ...

    async def approve_remedy(self, node_id: str) -> bool:
        """Release the node's held remedy item to the workers; False when none is held."""
        ...

    async def withdraw_remedy(
        self, node_id: str, reason: str, *, unless_pin: str | None = None
    ) -> bool:
        """End the node's remedy still held for approval as ``cancelled`` (its drift resolved,
        or changed, before anyone approved it); False when none is held, or when ``unless_pin``
        is given and the held one reinstalls that driver. A remedy already running goes on:
        its own reads decide."""
        ...

    async def remedy_facts(self, claim: Claim, pool: str) -> RemedyFacts:
        """What a remedy's check needs, read now under the pool's lock (as ``facts``)."""
        ...

    async def update_item(
        self, rollout_id: str, node_id: str
    ) -> tuple[NodeStep, dict[str, Any]] | None:
        """The state and progress of the node's update item in the rollout, if any."""
        ...

    async def claim(self, lease_s: float) -> Claim | None:
        """Claim the oldest non-final item that is free or whose holder's lease lapsed: the
        next fencing token, one more attempt, a lease of ``lease_s``."""
        ...

    async def claim_orphan(
        self, idle_s: float, lease_s: float, states: frozenset[NodeStep]
    ) -> Claim | None:
        """Claim the oldest item in one of ``states`` that nobody has held for ``idle_s``: its
        holder's lease lapsed (or it was released) at least that long ago and no claim took it
        since. The next fencing token, a lease of ``lease_s``; attempts are not counted."""
        ...

    async def still_holds(self, claim: Claim, lease_s: float) -> bool:
        """Lock the item, check this claim was not taken over (the fence) and extend it."""
        ...

    async def step_now(self, claim: Claim) -> NodeStep:
        """The item's step now, whoever holds it, locked until the transaction ends (a later
        move of the item waits for it)."""
        ...

    async def holds_node_out(self, node_id: str) -> bool:
        """Lock the node's work items (a later move of any of them waits until the transaction
        ends) and say whether one of them may keep the node out of service: an item not yet
        ended (it may cordon, or hold its cordon), or a latest item that ended quarantined."""
        ...

    async def facts(self, claim: Claim, pool: str) -> Facts:
        """What the blast-radius check needs, read now in this transaction."""
        ...

    async def maintenance(self, pool: str, site: str) -> list[Declared]:
        """The windows declared for ``pool`` and for ``site`` (none: no restriction)."""
        ...

    async def record_maintenance(
        self, scope: str, name: str, timezone: str, windows: tuple[str, ...] | None, at: datetime
    ) -> bool:
        """Keep what the planner announced for ``scope``/``name`` (None: no windows), unless
        a later announcement is held already; True when kept."""
        ...

    async def save_progress(self, claim: Claim, progress: dict[str, Any]) -> None:
        """Record progress within a step (before a push is sent: that it is being sent)."""
        ...

    async def wake_halted(self) -> int:
        """Make every parked item of a halted rollout claimable now (it ends, it does not wait
        for a place); returns how many."""
        ...

    async def parked_pools(self) -> list[str]:
        """The pools that have parked items, in name order."""
        ...

    async def wake_parked(self, pool: str) -> int:
        """The per-pool sweep behind the wake on a freed place (``advance``): under the pool's
        lock, make as many of its parked items claimable as it has free places (at least one,
        so that one of them re-checks what else may have changed), longest parked first;
        returns how many."""
        ...

    async def advance(
        self,
        claim: Claim,
        target: NodeStep,
        *,
        reason: str = "",
        progress: dict[str, Any] | None = None,
        retry_in_s: float = 0.0,
        parked: bool = False,
        keep_lease_s: float | None = None,
    ) -> Claim | None:
        """Move the item to ``target`` (``domain.steps.transition``), record the step in its
        history and release the lease (claimable again after ``retry_in_s``): the fencing token
        moves on, so this claim no longer holds the item.

        ``parked``: the item waits for a place in its pool's out-of-service budget; it becomes
        claimable as soon as an item of its pool leaves service (an advance out of
        ``OUT_OF_SERVICE`` wakes parked items of that pool, in the same transaction), when the
        per-pool sweep (``wake_parked``, ``wake_halted``) wakes it, or after ``retry_in_s`` at
        the latest.

        ``keep_lease_s``: when the next step is ready now (``target`` is a working state other
        than the one left, no ``retry_in_s``, not parked), claim the item again in the same
        write for ``keep_lease_s`` (a new token, as ``claim`` gives) and return that claim:
        the caller runs the next step without queueing for it. None otherwise."""
        ...

    async def complete_wave(self, rollout_id: str, wave: int) -> WaveResult | None:
        """If every item of the wave reached an end and the wave is not yet completed, mark
        it completed and return its result; None otherwise."""
        ...

    async def history(self, node_id: str, limit: int) -> list[StepRecord]:
        """The node's steps, oldest first (the last ``limit``)."""
        ...

    async def completion_sent(self, rollout_id: str, wave: int, event_id: uuid.UUID) -> None:
        """Remember the id of the ``wave.completed`` just emitted for the wave."""
        ...

    async def unanswered_completions(
        self, after_s: float, max_redrives: int, limit: int
    ) -> list[Completion]:
        """Completed waves of rollouts not halted with no later wave recorded (the planner has
        not released the next one), re-driven fewer than ``max_redrives`` times, whose
        completion or last re-drive is older than ``after_s`` times 2 to the power of its
        re-drives; locked (skipping those another worker holds)."""
        ...

    async def redrive_completion(self, completion: Completion) -> bool:
        """Publish its ``wave.completed`` again with its id (``outbox.republish``) and count
        the re-drive; False when the outbox no longer holds the event (counted all the same)."""
        ...


class UpdaterStore(Protocol):
    """Opens units of work on the updater's state."""

    def transaction(self) -> AbstractAsyncContextManager[UpdaterTx]:
        """A transaction that commits when the block ends normally and vanishes if it raises."""
        ...


def one_statement(store: UpdaterStore) -> AbstractAsyncContextManager[UpdaterTx]:
    """A unit of work for a single statement: the store's ``statement()`` where it has one
    (PostgreSQL runs it without BEGIN and COMMIT, ``PooledStore.statement``: a claim, a lease
    renewal, a read), else a transaction (a store wrapped by a test)."""
    statement = getattr(store, "statement", None)
    if statement is None:
        return store.transaction()
    return cast(AbstractAsyncContextManager[UpdaterTx], statement())
