"""What the planner keeps, behind a small interface: bundles, intents, rollouts, waves, the
nodes each rollout holds, operator commands and the audit trail.

Handlers and the worker speak to a :class:`PlannerTx` only. PostgreSQL implements it in
``adapters/repository.py`` (migrations/0001_planner.sql); ``testing/memory_store.py`` keeps the
same semantics in dicts, so the handlers' and worker's logic is unit-tested without a database.
Rows are frozen dataclasses: a change is a ``dataclasses.replace`` handed back to ``save_*``,
after ``domain.rollout.transition`` allowed it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from lockstep_common.events.v1 import (
    AttestedComponent,
    FleetNode,
    IntentSubmitted,
    ScopeSelector,
    WaveStratum,
)
from lockstep_common.outbox import EventSink
from lockstep_planner.domain.approvals import Approval
from lockstep_planner.domain.fabric import FabricDomain
from lockstep_planner.domain.rollout import RolloutState, WaveState


@dataclass(frozen=True, slots=True)
class BundleRow:
    """An attested bundle, as ``bundle.attested`` described it."""

    stack_hash: str
    bundle_id: str
    bundle_version: str
    bundle_uri: str | None
    components: tuple[AttestedComponent, ...]
    attested_at: datetime


@dataclass(frozen=True, slots=True)
class IntentRow:
    """A received intent and what became of it."""

    intent_id: uuid.UUID
    event_id: uuid.UUID
    rollout_id: str
    intent: IntentSubmitted
    received_at: datetime
    state: str = "pending"
    reasons: tuple[str, ...] = ()
    attempts: int = 0
    lease_token: int = 0


@dataclass(frozen=True, slots=True)
class RolloutRow:
    """A planned rollout."""

    rollout_id: str
    intent_id: uuid.UUID
    stack_hash: str
    change_class: str
    scope: dict[str, Any]
    dry_run: bool
    state: RolloutState
    plan_hash: str
    plan: dict[str, Any]
    approvals_needed: int
    created_at: datetime
    updated_at: datetime
    approvals: tuple[str, ...] = ()
    """The approver of each counted approval."""
    signatures: tuple[str, ...] = ()
    """Their signatures: a replayed approval is recognised by its bytes."""
    reason: str = ""


@dataclass(frozen=True, slots=True)
class WaveRow:
    """One wave of a rollout and where it is."""

    rollout_id: str
    number: int
    state: WaveState
    node_ids: tuple[str, ...]
    components: tuple[str, ...]
    max_unavailable: int
    failure_budget: int
    soak_s: int
    planned_s: int
    strata: tuple[WaveStratum, ...] = ()
    gate_passed: bool = False
    succeeded: int = 0
    failed: int = 0
    released_at: datetime | None = None
    deadline: datetime | None = None
    soak_until: datetime | None = None
    release_event: uuid.UUID | None = None
    """The id of the ``wave.planned`` that released it (what a re-drive publishes again)."""
    redriven_at: datetime | None = None
    redrives: int = 0


@dataclass(frozen=True, slots=True)
class Command:
    """An operator's pause, resume or abort, waiting for the worker."""

    id: int
    rollout_id: str
    action: str
    requested_by: str
    reason: str = ""
    approval: Approval | None = None
    """For ``approve``: the signed record."""
    bundle: str = ""
    """For ``pin``: the stack hash of the bundle to pin (``rollout_id`` is then
    :data:`FABRIC_KEY` + the domain)."""


FABRIC_KEY = "fabric:"
"""Prefix of the key a fabric domain's commands and audit lines are filed under (the audit
trail's ``rollout_id`` column): ``fabric:<domain>``."""


@dataclass(frozen=True, slots=True)
class FabricRow:
    """One fabric domain as the planner keeps it: its state, its nodes, who changed it last."""

    domain: FabricDomain
    node_ids: tuple[str, ...]
    changed_by: str
    changed_at: datetime


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One line of the audit trail: who did what, when and why."""

    rollout_id: str
    at: datetime
    actor: str
    action: str
    detail: str


@dataclass(frozen=True, slots=True)
class WindowsRow:
    """The maintenance windows a pool or a site has (``lockstep_common.maintenance``)."""

    scope: str
    """``pool`` or ``site``."""
    name: str
    timezone: str
    windows: tuple[str, ...]
    set_by: str
    set_at: datetime


@dataclass(frozen=True, slots=True)
class DueWave:
    """A wave a timer has come due for."""

    rollout_id: str
    number: int
    why: str = field(default="soak")
    """``soak``: gate passed and soak over; ``deadline``: released and out of time;
    ``redrive``: released, and no node of it has moved for the re-drive interval."""


class PlannerTx(Protocol):
    """One transaction: everything done through it, and every event emitted to ``events``,
    commits together or not at all."""

    @property
    def events(self) -> EventSink:
        """Where events that must commit with this transaction's changes go."""
        ...

    async def save_bundle(self, bundle: BundleRow) -> None:
        """Insert or replace the attested bundle of ``bundle.stack_hash``."""
        ...

    async def bundle(self, stack_hash: str) -> BundleRow | None:
        """The attested bundle of a stack hash."""
        ...

    async def add_intent(self, intent: IntentRow, *, held_s: float | None = None) -> bool:
        """Record an intent once per intent id; False when its id was already recorded. With
        ``held_s``, recorded already claimed (``planning``, attempt 1, fencing token 1) for that
        long: whoever recorded it plans it now, and the worker takes it over only if that
        lease lapses."""
        ...

    async def claim_intent(self, lease_s: float, now: datetime) -> IntentRow | None:
        """Claim the oldest pending intent, or one whose holder's lease lapsed: ``planning``,
        next fencing token, one more attempt."""
        ...

    async def still_holds(self, intent: IntentRow) -> bool:
        """Lock the intent and check this claim was not taken over (the fence)."""
        ...

    async def decide_intent(
        self, intent_id: uuid.UUID, state: str, reasons: Iterable[str], now: datetime
    ) -> None:
        """Close an intent: ``planned`` or ``refused`` with its reasons."""
        ...

    async def busy_nodes(self, node_ids: Iterable[str]) -> dict[str, str]:
        """Node -> the live rollout (planned, running, paused or halted) holding it."""
        ...

    async def add_rollout(self, rollout: RolloutRow, waves: Iterable[WaveRow]) -> None:
        """Record a rollout, its waves, and the nodes it holds."""
        ...

    async def rollout(self, rollout_id: str) -> RolloutRow | None:
        """The rollout, locked until the transaction ends."""
        ...

    async def plan_with_hash(self, plan_hash: str) -> dict[str, Any] | None:
        """The stored plan of the newest rollout (a dry run or not) whose plan has this hash:
        the plan an approver reviewed."""
        ...

    async def save_rollout(self, rollout: RolloutRow) -> None:
        """Replace the rollout's state, approvals, reason and ``updated_at``."""
        ...

    async def waves(self, rollout_id: str) -> list[WaveRow]:
        """The rollout's waves in order."""
        ...

    async def save_wave(self, wave: WaveRow) -> None:
        """Replace a wave's mutable fields (state, gate, counts, times)."""
        ...

    async def record_step(self, rollout_id: str, node_id: str, step: str, at: datetime) -> None:
        """Remember the last device step seen for a node of a rollout."""
        ...

    async def due(self, now: datetime, limit: int, redrive_s: float) -> list[DueWave]:
        """Waves whose soak ended after a passed gate, whose deadline passed while released,
        or, released in a running rollout, with no device step of theirs, release or re-drive
        for ``redrive_s``; locked (skipping those another worker holds)."""
        ...

    async def next_soak_end(self, now: datetime) -> datetime | None:
        """The earliest end after ``now`` of a soak under way in a running rollout: the next
        instant ``due`` may find a wave to pass (the worker waits until then, not a poll)."""
        ...

    async def republish(self, event_id: uuid.UUID, attempt: str) -> bool:
        """Publish a committed event again with its id (``lockstep_common.outbox.republish``);
        False when the outbox no longer holds it."""
        ...

    async def open_commands(self, limit: int) -> list[Command]:
        """Operator commands not yet carried out, oldest first, locked."""
        ...

    async def finish_command(self, command_id: int, outcome: str, now: datetime) -> None:
        """Mark a command done with what came of it."""
        ...

    async def audit(self, *entries: AuditEntry) -> None:
        """Append to the audit trail, in order (none: nothing)."""
        ...

    async def maintenance(self) -> list[WindowsRow]:
        """Every pool's and site's maintenance windows, by scope and name."""
        ...

    async def set_maintenance(
        self, scope: str, name: str, row: WindowsRow | None
    ) -> WindowsRow | None:
        """Replace the windows of ``scope``/``name`` (None: remove them, no restriction), under
        the row's lock; returns what it held before."""
        ...

    async def fabric_domains(self, ids: Iterable[str] | None = None) -> dict[str, FabricRow]:
        """Domain -> its row (of ``ids``, or all), locked until the transaction ends."""
        ...

    async def save_fabric(self, *rows: FabricRow) -> None:
        """Insert or replace fabric domains' rows (one statement however many)."""
        ...


class PlannerStore(Protocol):
    """Opens units of work on the planner's state."""

    def transaction(self) -> AbstractAsyncContextManager[PlannerTx]:
        """A transaction that commits when the block ends normally and vanishes if it raises."""
        ...


class Occupancy(Protocol):
    """Where the planner learns which nodes run a job: the scheduler (a fabric domain is
    OCCUPIED while a job runs on any of its nodes)."""

    async def busy_nodes(self) -> frozenset[str]:
        """Every node a running job is placed on.

        Raises:
            TransientError: the scheduler did not answer; lifecycles stay as they were.
        """
        ...


class FleetSource(Protocol):
    """Where the planner learns the fleet: the inventory's ``fleet.query``, paged."""

    async def nodes(self, scope: ScopeSelector | None) -> list[FleetNode]:
        """Every registered node (in ``scope``, or all), in node id order.

        Raises:
            TransientError: the inventory did not answer; planning is retried later.
        """
        ...
