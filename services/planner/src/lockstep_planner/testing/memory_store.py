"""An in-memory ``PlannerStore`` and ``FleetSource`` for unit tests of handlers and the worker.

It keeps the PostgreSQL store's semantics (adapters/repository.py): one intent per intent id;
claims take the oldest pending intent or one whose lease lapsed and bump the fencing token; a
transaction's changes and events commit together when its block ends and vanish if it raises.
Its lease clock is ``now``, moved by the test.
"""

from __future__ import annotations

import copy
import dataclasses
import uuid
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from lockstep_common.envelope import source_of
from lockstep_common.errors import TransientError
from lockstep_common.events.v1 import FleetNode, ScopeSelector
from lockstep_common.outbox import EventSink
from lockstep_common.testing import RecordedEvents
from lockstep_planner.domain.approvals import Approval
from lockstep_planner.domain.rollout import RolloutState
from lockstep_planner.store import (
    AuditEntry,
    BundleRow,
    Command,
    DueWave,
    FabricRow,
    IntentRow,
    RolloutRow,
    WaveRow,
    WindowsRow,
)

START = datetime(2026, 3, 2, 12, tzinfo=UTC)
LIVE = frozenset(
    {RolloutState.PLANNED, RolloutState.RUNNING, RolloutState.PAUSED, RolloutState.HALTED}
)


@dataclass(slots=True)
class _Tables:
    bundles: dict[str, BundleRow] = field(default_factory=dict)
    intents: dict[uuid.UUID, IntentRow] = field(default_factory=dict)
    leases: dict[uuid.UUID, datetime] = field(default_factory=dict)
    rollouts: dict[str, RolloutRow] = field(default_factory=dict)
    waves: dict[tuple[str, int], WaveRow] = field(default_factory=dict)
    nodes: dict[tuple[str, str], tuple[int, str | None]] = field(default_factory=dict)
    commands: dict[int, tuple[Command, str | None]] = field(default_factory=dict)
    audit: list[AuditEntry] = field(default_factory=list)
    windows: dict[tuple[str, str], WindowsRow] = field(default_factory=dict)
    steps: dict[tuple[str, int], datetime] = field(default_factory=dict)
    """(rollout, wave) -> the newest device step seen of a node of it."""
    published: set[uuid.UUID] = field(default_factory=set)
    """Event ids committed to the outbox (a test may drop some, as a retention purge)."""
    republished: list[tuple[uuid.UUID, str]] = field(default_factory=list)
    fabric: dict[str, FabricRow] = field(default_factory=dict)


class MemoryTx:
    """A ``PlannerTx`` on a private copy of the tables."""

    def __init__(self, tables: _Tables, events: EventSink, now: datetime) -> None:
        self.t = tables
        self._events = events
        self._now = now

    @property
    def events(self) -> EventSink:
        return self._events

    async def save_bundle(self, bundle: BundleRow) -> None:
        self.t.bundles[bundle.stack_hash] = bundle

    async def bundle(self, stack_hash: str) -> BundleRow | None:
        return self.t.bundles.get(stack_hash)

    async def add_intent(self, intent: IntentRow, *, held_s: float | None = None) -> bool:
        if intent.intent_id in self.t.intents:
            return False
        if held_s is not None:
            intent = dataclasses.replace(intent, state="planning", attempts=1, lease_token=1)
            self.t.leases[intent.intent_id] = self._now + timedelta(seconds=held_s)
        self.t.intents[intent.intent_id] = intent
        return True

    async def claim_intent(self, lease_s: float, now: datetime) -> IntentRow | None:
        for row in sorted(self.t.intents.values(), key=lambda r: r.received_at):
            lapsed = row.state == "planning" and self.t.leases[row.intent_id] < self._now
            if row.state == "pending" or lapsed:
                claimed = dataclasses.replace(
                    row,
                    state="planning",
                    attempts=row.attempts + 1,
                    lease_token=row.lease_token + 1,
                )
                self.t.intents[row.intent_id] = claimed
                self.t.leases[row.intent_id] = self._now + timedelta(seconds=lease_s)
                return claimed
        return None

    async def still_holds(self, intent: IntentRow) -> bool:
        row = self.t.intents[intent.intent_id]
        return row.state == "planning" and row.lease_token == intent.lease_token

    async def decide_intent(
        self, intent_id: uuid.UUID, state: str, reasons: Iterable[str], now: datetime
    ) -> None:
        self.t.intents[intent_id] = dataclasses.replace(
            self.t.intents[intent_id], state=state, reasons=tuple(reasons)
        )

    async def busy_nodes(self, node_ids: Iterable[str]) -> dict[str, str]:
        wanted = set(node_ids)
        return {
            node: rollout_id
            for (rollout_id, node) in self.t.nodes
            if node in wanted
            and self.t.rollouts[rollout_id].state in LIVE
            and not self.t.rollouts[rollout_id].dry_run
        }

    async def add_rollout(self, rollout: RolloutRow, waves: Iterable[WaveRow]) -> None:
        if rollout.rollout_id in self.t.rollouts or any(
            r.intent_id == rollout.intent_id for r in self.t.rollouts.values()
        ):
            raise ValueError(f"duplicate rollout {rollout.rollout_id}")  # a unique key
        self.t.rollouts[rollout.rollout_id] = rollout
        for w in waves:
            self.t.waves[(w.rollout_id, w.number)] = w
            for n in w.node_ids:
                self.t.nodes[(rollout.rollout_id, n)] = (w.number, None)

    async def rollout(self, rollout_id: str) -> RolloutRow | None:
        return self.t.rollouts.get(rollout_id)

    async def plan_with_hash(self, plan_hash: str) -> dict[str, Any] | None:
        found = [r for r in self.t.rollouts.values() if r.plan_hash == plan_hash]
        return max(found, key=lambda r: r.created_at).plan if found else None

    async def save_rollout(self, rollout: RolloutRow) -> None:
        self.t.rollouts[rollout.rollout_id] = rollout

    async def waves(self, rollout_id: str) -> list[WaveRow]:
        return sorted(
            (w for (r, _), w in self.t.waves.items() if r == rollout_id), key=lambda w: w.number
        )

    async def save_wave(self, wave: WaveRow) -> None:
        self.t.waves[(wave.rollout_id, wave.number)] = wave

    async def record_step(self, rollout_id: str, node_id: str, step: str, at: datetime) -> None:
        key = (rollout_id, node_id)
        if key in self.t.nodes:
            wave = self.t.nodes[key][0]
            self.t.nodes[key] = (wave, step)
            last = self.t.steps.get((rollout_id, wave))
            self.t.steps[(rollout_id, wave)] = at if last is None else max(last, at)

    async def due(self, now: datetime, limit: int, redrive_s: float) -> list[DueWave]:
        out = []
        for (rollout_id, number), w in sorted(self.t.waves.items()):
            state = self.t.rollouts[rollout_id].state
            moved = [
                t
                for t in (w.released_at, w.redriven_at, self.t.steps.get((rollout_id, number)))
                if t
            ]
            if (
                w.state == "soaking"
                and w.gate_passed
                and w.soak_until is not None
                and w.soak_until <= now
                and state is RolloutState.RUNNING
            ):
                out.append(DueWave(rollout_id, number, "soak"))
            elif (
                w.state == "released"
                and w.deadline is not None
                and w.deadline <= now
                and state in (RolloutState.RUNNING, RolloutState.PAUSED)
            ):
                out.append(DueWave(rollout_id, number, "deadline"))
            elif (
                w.state == "released"
                and state is RolloutState.RUNNING
                and moved
                and max(moved) <= now - timedelta(seconds=redrive_s)
            ):
                out.append(DueWave(rollout_id, number, "redrive"))
        return out[:limit]

    async def next_soak_end(self, now: datetime) -> datetime | None:
        ends = [
            w.soak_until
            for (rollout_id, _), w in self.t.waves.items()
            if w.state == "soaking"
            and self.t.rollouts[rollout_id].state is RolloutState.RUNNING
            and w.soak_until is not None
            and w.soak_until > now
        ]
        return min(ends, default=None)

    async def republish(self, event_id: uuid.UUID, attempt: str) -> bool:
        if event_id not in self.t.published:
            return False
        self.t.republished.append((event_id, attempt))
        return True

    async def open_commands(self, limit: int) -> list[Command]:
        return [
            c for c, done in sorted(self.t.commands.values(), key=lambda x: x[0].id) if done is None
        ][:limit]

    async def finish_command(self, command_id: int, outcome: str, now: datetime) -> None:
        command, _ = self.t.commands[command_id]
        self.t.commands[command_id] = (command, outcome)

    async def audit(self, *entries: AuditEntry) -> None:
        self.t.audit.extend(entries)

    async def fabric_domains(self, ids: Iterable[str] | None = None) -> dict[str, FabricRow]:
        wanted = None if ids is None else set(ids)
        return {d: row for d, row in sorted(self.t.fabric.items()) if wanted is None or d in wanted}

    async def maintenance(self) -> list[WindowsRow]:
        return [row for _, row in sorted(self.t.windows.items())]

    async def set_maintenance(
        self, scope: str, name: str, row: WindowsRow | None
    ) -> WindowsRow | None:
        before = self.t.windows.pop((scope, name), None)
        if row is not None:
            self.t.windows[(scope, name)] = row
        return before

    async def save_fabric(self, *rows: FabricRow) -> None:
        for row in rows:
            self.t.fabric[row.domain.id] = row


class MemoryStore:
    """The planner's store in a few dicts; ``events`` holds what committed transactions emitted."""

    def __init__(self, *, now: datetime = START) -> None:
        self.now = now
        self.events = RecordedEvents(source=source_of("planner"))
        self.tables = _Tables()

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[MemoryTx]:
        draft = copy.deepcopy(self.tables)
        pending = RecordedEvents(source=self.events.source)
        yield MemoryTx(draft, pending, self.now)
        self.tables = draft
        self.tables.published.update(env.event_id for _, env in pending.emitted)
        self.events.emitted.extend(pending.emitted)

    def command(
        self,
        rollout_id: str,
        action: str,
        by: str = "alice",
        reason: str = "",
        approval: Approval | None = None,
        bundle: str = "",
    ) -> None:
        """What `lockstep rollout approve|pause|resume|abort` and `lockstep fabric pin` write."""
        number = len(self.tables.commands) + 1
        command = Command(number, rollout_id, action, by, reason, approval, bundle)
        self.tables.commands[number] = (command, None)

    def audit_of(self, rollout_id: str) -> list[AuditEntry]:
        return [a for a in self.tables.audit if a.rollout_id == rollout_id]


class MemoryOccupancy:
    """An ``Occupancy`` over a set the test changes; ``down`` makes it fail like a silent
    scheduler."""

    def __init__(self, busy: Iterable[str] = ()) -> None:
        self.busy = set(busy)
        self.down = False

    async def busy_nodes(self) -> frozenset[str]:
        if self.down:
            raise TransientError("scheduler did not answer")
        return frozenset(self.busy)


class MemoryFleet:
    """A ``FleetSource`` over a list of nodes; ``down`` makes it fail like a silent inventory."""

    def __init__(self, nodes: Iterable[FleetNode]) -> None:
        self.fleet = sorted(nodes, key=lambda n: n.node_id)
        self.down = False
        self.asked = 0

    async def nodes(self, scope: ScopeSelector | None) -> list[FleetNode]:
        self.asked += 1
        if self.down:
            raise TransientError("no answer on fleet.query")
        return list(self.fleet)
