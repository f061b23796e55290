"""An in-memory ``UpdaterStore`` for unit tests of handlers and the worker (no PostgreSQL).

It keeps the PostgreSQL store's semantics (adapters/repository.py): one item per rollout and
node, recorded once per wave; claims take the oldest free non-final item (or one whose lease
lapsed), bump the fencing token and count an attempt; every state change goes through
``domain.steps.transition``; a transaction's changes and events commit together when its block
ends and vanish if it raises. Its clock (PostgreSQL's ``now()``) stands still until a test calls
:meth:`MemoryStore.advance`.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from lockstep_common.envelope import source_of
from lockstep_common.events.v1 import AttestedComponent, WavePlanned
from lockstep_common.testing import RecordedEvents
from lockstep_updater.domain.guard import Facts, RemedyFacts
from lockstep_updater.domain.steps import (
    INITIAL,
    OUT_OF_SERVICE,
    TERMINAL,
    NodeStep,
    runs_on,
    transition,
)
from lockstep_updater.domain.windows import Declared
from lockstep_updater.store import (
    REMEDY,
    ROLLBACK,
    UPDATE,
    Claim,
    Completion,
    StepRecord,
    Target,
    WaveResult,
)

START = datetime(2026, 1, 1, tzinfo=UTC)
HELD = datetime.max.replace(tzinfo=UTC)
"""A held remedy's lease: PostgreSQL's 'infinity' (never claimable until approved)."""
FAILURES = frozenset({NodeStep.FAILED, NodeStep.QUARANTINED})


@dataclass(slots=True)
class Item:
    """One row of ``updater.node_work``."""

    id: int
    rollout_id: str
    wave: int
    node_id: str
    components: tuple[str, ...]
    correlation_id: str | None
    state: NodeStep = INITIAL
    attempts: int = 0
    lease_token: int = 0
    lease_until: datetime | None = None
    claimed_at: datetime | None = None
    released_at: datetime | None = None
    reason: str = ""
    pool: str = ""
    progress: dict[str, Any] = field(default_factory=dict)
    updated_at: datetime = START
    kind: str = UPDATE
    parked: bool = False  # waiting for a place in its pool's budget (``UpdaterTx.advance``)

    @property
    def ready_at(self) -> datetime:
        """Since when the item may be claimed: claims take the longest ready first."""
        return self.lease_until or self.updated_at


def _claim_order(item: Item) -> tuple[datetime, int]:
    """Longest ready first, as the Postgres store's claim index orders them."""
    return item.ready_at, item.id


@dataclass(slots=True)
class Wave:
    node_ids: tuple[str, ...]
    max_unavailable: int
    failure_budget: int
    correlation_id: str | None
    completed: bool = False
    completed_at: datetime | None = None
    completed_event: uuid.UUID | None = None
    redriven_at: datetime | None = None
    redrives: int = 0


@dataclass(slots=True)
class _Tables:
    plans: dict[str, tuple[str, frozenset[str]]] = field(default_factory=dict)
    plan_waves: dict[str, dict[str, int]] = field(default_factory=dict)
    bundles: dict[str, tuple[str | None, tuple[AttestedComponent, ...]]] = field(
        default_factory=dict
    )
    halted: dict[str, str] = field(default_factory=dict)
    waves: dict[tuple[str, int], Wave] = field(default_factory=dict)
    republished: list[tuple[uuid.UUID, str]] = field(default_factory=list)
    """Events published again (``outbox.republish``), with their re-drive tag."""
    items: dict[int, Item] = field(default_factory=dict)
    steps: list[tuple[str, StepRecord]] = field(default_factory=list)
    windows: dict[tuple[str, str], tuple[str, tuple[str, ...] | None, datetime]] = field(
        default_factory=dict
    )


class MemoryStore:
    """The updater store in a few dicts; ``events`` holds what committed transactions emitted."""

    def __init__(
        self,
        *,
        source: str = source_of("updater"),
        now: datetime = START,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.now = now
        self._clock = clock  # a running clock (benchmarks) instead of one tests move
        self.events = RecordedEvents(source=source)
        self._tables = _Tables()
        self._source = source

    @property
    def items(self) -> list[Item]:
        """Every work item, in id order."""
        return [self._tables.items[i] for i in sorted(self._tables.items)]

    def item(self, node_id: str) -> Item:
        """The (latest) work item of ``node_id``."""
        return [i for i in self.items if i.node_id == node_id][-1]

    def advance(self, seconds: float) -> None:
        """Move the store's clock on (leases lapse)."""
        self.now += timedelta(seconds=seconds)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[MemoryTx]:
        """Changes and events made through the yielded tx commit when the block ends."""
        # The append-only lists are cut back on a rollback, not copied: a copy of every step
        # ever recorded made each transaction slower than the last (``bench update``).
        tables = self._tables
        steps, republished = len(tables.steps), len(tables.republished)
        before = copy.deepcopy(replace(tables, steps=[], republished=[]))
        now = self.now if self._clock is None else self._clock()
        tx = MemoryTx(tables, RecordedEvents(source=self._source), now)
        try:
            yield tx
        except BaseException:
            before.steps, before.republished = (
                tables.steps[:steps],
                tables.republished[:republished],
            )
            self._tables = before
            raise
        self.events.emitted.extend(tx.events.emitted)


@dataclass(slots=True)
class MemoryTx:
    """An ``UpdaterTx`` on the store's tables; ``now`` is fixed for the transaction."""

    tables: _Tables
    events: RecordedEvents
    now: datetime

    async def record_plan(
        self,
        rollout_id: str,
        stack_hash: str,
        nodes: frozenset[str],
        waves: Mapping[str, int] | None = None,
    ) -> None:
        if rollout_id not in self.tables.plans:
            self.tables.plans[rollout_id] = (stack_hash, nodes)
            self.tables.plan_waves[rollout_id] = dict(waves or {})

    async def plan_waves(self, rollout_id: str) -> dict[str, int]:
        return dict(self.tables.plan_waves.get(rollout_id, {}))

    async def plan_nodes(self, rollout_id: str) -> frozenset[str] | None:
        plan = self.tables.plans.get(rollout_id)
        return None if plan is None else plan[1]

    async def record_bundle(
        self, stack_hash: str, bundle_uri: str | None, components: tuple[AttestedComponent, ...]
    ) -> None:
        self.tables.bundles[stack_hash] = (bundle_uri, components)

    async def target(self, rollout_id: str) -> Target | None:
        plan = self.tables.plans.get(rollout_id)
        if plan is None or plan[0] not in self.tables.bundles:
            return None
        uri, components = self.tables.bundles[plan[0]]
        return Target(plan[0], uri, components)

    async def record_wave(self, wave: WavePlanned, correlation_id: str | None) -> bool:
        key = (wave.rollout_id, wave.wave)
        if key in self.tables.waves:
            return False
        self.tables.waves[key] = Wave(
            wave.node_ids, wave.max_unavailable, wave.failure_budget, correlation_id
        )
        taken = {(i.rollout_id, i.node_id) for i in self.tables.items.values() if i.kind == UPDATE}
        for node_id in wave.node_ids:
            if (wave.rollout_id, node_id) in taken:
                continue  # a node appears in one wave of a rollout; the first one keeps it
            item_id = max(self.tables.items, default=0) + 1
            self.tables.items[item_id] = Item(
                item_id,
                wave.rollout_id,
                wave.wave,
                node_id,
                tuple(c.value for c in wave.components),
                correlation_id,
                updated_at=self.now,
            )
        return True

    async def halt(self, rollout_id: str, reason: str) -> None:
        self.tables.halted.setdefault(rollout_id, reason)

    async def request_rollbacks(self, rollout_id: str, wave: int) -> int:
        items = sorted(self.tables.items.values(), key=lambda i: i.id)
        have = {i.node_id for i in items if i.rollout_id == rollout_id and i.kind == ROLLBACK}
        added = 0
        for item in items:
            if (item.rollout_id, item.wave, item.kind) != (rollout_id, wave, UPDATE):
                continue
            if item.node_id in have:
                continue
            item_id = max(self.tables.items) + 1
            self.tables.items[item_id] = Item(
                item_id,
                rollout_id,
                wave,
                item.node_id,
                item.components,
                item.correlation_id,
                updated_at=self.now,
                kind=ROLLBACK,
            )
            added += 1
        return added

    async def record_remedy(
        self,
        node_id: str,
        remedy_id: str,
        *,
        held: bool,
        progress: dict[str, Any],
        correlation_id: str | None,
    ) -> bool:
        ended_well = {NodeStep.DONE, NodeStep.CANCELLED}
        for item in self.tables.items.values():
            if (item.node_id, item.kind) == (node_id, REMEDY) and item.state not in ended_well:
                return False
            if (item.rollout_id, item.node_id, item.kind) == (remedy_id, node_id, REMEDY):
                return False
        item_id = max(self.tables.items, default=0) + 1
        self.tables.items[item_id] = Item(
            item_id,
            remedy_id,
            0,
            node_id,
            ("driver",),
            correlation_id,
            updated_at=self.now,
            kind=REMEDY,
            progress=copy.deepcopy(progress),
            lease_until=HELD if held else None,
        )
        return True

    async def approve_remedy(self, node_id: str) -> bool:
        for item in self.tables.items.values():
            if (item.node_id, item.kind, item.state, item.lease_until) == (
                node_id,
                REMEDY,
                NodeStep.PENDING,
                HELD,
            ):
                item.lease_until = None
                item.updated_at = self.now
                return True
        return False

    async def withdraw_remedy(self, node_id: str, reason: str) -> bool:
        for item in self.tables.items.values():
            if (item.node_id, item.kind, item.state, item.lease_until) == (
                node_id,
                REMEDY,
                NodeStep.PENDING,
                HELD,
            ):
                item.state = transition(item.state, NodeStep.CANCELLED)
                item.reason, item.lease_until, item.updated_at = reason, None, self.now
                return True
        return False

    async def remedy_facts(self, claim: Claim, pool: str) -> RemedyFacts:
        self.tables.items[claim.id].pool = pool
        others = self.tables.items.values()
        in_rollout = next(
            (
                i.rollout_id
                for _, i in sorted(self.tables.items.items())
                if i.node_id == claim.node_id and i.kind != REMEDY and i.state not in TERMINAL
            ),
            None,
        )
        out = [
            i for i in others if i.id != claim.id and i.pool == pool and i.state in OUT_OF_SERVICE
        ]
        return RemedyFacts(
            node_id=claim.node_id,
            pool=pool,
            in_rollout=in_rollout,
            others_out=len(out),
            remedies_out=sum(1 for i in out if i.kind == REMEDY),
        )

    async def update_item(
        self, rollout_id: str, node_id: str
    ) -> tuple[NodeStep, dict[str, Any]] | None:
        for item in self.tables.items.values():
            if (item.rollout_id, item.node_id, item.kind) == (rollout_id, node_id, UPDATE):
                return item.state, copy.deepcopy(item.progress)
        return None

    def _free(self, item: Item) -> bool:
        return item.state not in TERMINAL and (
            item.lease_until is None or item.lease_until <= self.now
        )

    def _claim_of(self, item: Item) -> Claim:
        return Claim(
            item.id,
            item.rollout_id,
            item.wave,
            item.node_id,
            item.state,
            item.lease_token,
            item.attempts,
            item.components,
            copy.deepcopy(item.progress),
            item.correlation_id,
            item.kind,
        )

    async def claim(self, lease_s: float) -> Claim | None:
        free = sorted(
            (i for i in self.tables.items.values() if self._free(i)),
            key=_claim_order,
        )
        if not free:
            return None
        item = free[0]
        if item.state is NodeStep.PENDING:
            item.state = transition(item.state, NodeStep.PREFLIGHT)
        item.attempts += 1
        item.lease_token += 1
        item.lease_until = self.now + timedelta(seconds=lease_s)
        item.claimed_at = self.now
        item.parked = False
        return self._claim_of(item)

    async def step_now(self, claim: Claim) -> NodeStep:
        return self.tables.items[claim.id].state

    async def holds_node_out(self, node_id: str) -> bool:
        items = [i for _, i in sorted(self.tables.items.items()) if i.node_id == node_id]
        latest_quarantined = bool(items) and items[-1].state is NodeStep.QUARANTINED
        return latest_quarantined or any(i.state not in TERMINAL for i in items)

    async def claim_orphan(
        self, idle_s: float, lease_s: float, states: frozenset[NodeStep]
    ) -> Claim | None:
        since = self.now - timedelta(seconds=idle_s)
        for _, item in sorted(self.tables.items.items()):
            idle = item.lease_until or item.released_at or item.claimed_at
            if item.state in states - TERMINAL and idle is not None and idle <= since:
                item.lease_token += 1
                item.lease_until = self.now + timedelta(seconds=lease_s)
                item.claimed_at = self.now
                return self._claim_of(item)
        return None

    async def still_holds(self, claim: Claim, lease_s: float) -> bool:
        item = self.tables.items[claim.id]
        if item.lease_token != claim.token or item.state in TERMINAL:
            return False
        item.lease_until = self.now + timedelta(seconds=lease_s)
        return True

    async def maintenance(self, pool: str, site: str) -> list[Declared]:
        return [
            Declared(scope, name, timezone, windows)
            for (scope, name), (timezone, windows, _) in self.tables.windows.items()
            if windows is not None and (scope, name) in {("pool", pool), ("site", site)}
        ]

    async def record_maintenance(
        self, scope: str, name: str, timezone: str, windows: tuple[str, ...] | None, at: datetime
    ) -> bool:
        held = self.tables.windows.get((scope, name))
        if held is not None and held[2] >= at:
            return False
        self.tables.windows[(scope, name)] = (timezone, windows, at)
        return True

    async def facts(self, claim: Claim, pool: str) -> Facts:
        wave = self.tables.waves.get((claim.rollout_id, claim.wave))
        plan = await self.plan_nodes(claim.rollout_id)
        item = self.tables.items[claim.id]
        item.pool = pool
        siblings = [
            i
            for i in self.tables.items.values()
            if i.rollout_id == claim.rollout_id and i.wave == claim.wave and i.kind == UPDATE
        ]
        others_out = sum(
            1
            for i in self.tables.items.values()
            if i.id != claim.id and i.pool == pool and i.state in OUT_OF_SERVICE
        )
        busy = next(
            (
                i.rollout_id
                for i in self.tables.items.values()
                if i.node_id == claim.node_id
                and i.id != claim.id
                and i.kind == REMEDY
                and i.state in OUT_OF_SERVICE
            ),
            None,
        )
        return Facts(
            node_id=claim.node_id,
            busy_with=None if busy is None else f"GSP remedy {busy}",
            halted=self.tables.halted.get(claim.rollout_id),
            wave_released=wave is not None,
            in_wave=wave is not None and claim.node_id in wave.node_ids,
            in_plan=None if plan is None else claim.node_id in plan,
            failures=sum(1 for i in siblings if i.state in FAILURES),
            failure_budget=wave.failure_budget if wave else 0,
            pool=pool,
            others_out=others_out,
            max_unavailable=wave.max_unavailable if wave else 0,
            wave=claim.wave,
            approved_wave=(await self.plan_waves(claim.rollout_id)).get(claim.node_id),
        )

    async def save_progress(self, claim: Claim, progress: dict[str, Any]) -> None:
        self.tables.items[claim.id].progress = copy.deepcopy(progress)

    def _wake_parked(self, pool: str) -> None:
        items = self.tables.items.values()
        parked = sorted((i for i in items if i.parked and i.pool == pool), key=_claim_order)
        limit = max(
            (
                w.max_unavailable
                for i in parked
                if (w := self.tables.waves.get((i.rollout_id, i.wave))) is not None
            ),
            default=1,
        )
        out = sum(1 for i in items if i.pool == pool and i.state in OUT_OF_SERVICE)
        for waiting in parked[: max(1, limit - out)]:
            waiting.parked, waiting.lease_until = False, self.now

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
        item = self.tables.items[claim.id]
        before = item.state
        claimed_at = item.claimed_at
        item.state = transition(item.state, target)
        item.lease_token += 1  # released: the claim that ended the step holds nothing more
        item.reason = reason
        if progress is not None:
            item.progress = copy.deepcopy(progress)
        item.lease_until = self.now + timedelta(seconds=retry_in_s) if retry_in_s else None
        item.updated_at = self.now
        item.released_at = self.now
        item.parked = parked
        if before in OUT_OF_SERVICE and item.state not in OUT_OF_SERVICE and item.pool:
            self._wake_parked(item.pool)
        record = StepRecord(
            claim.rollout_id,
            claim.wave,
            before.value,
            claim.attempts,
            claim.token,
            claimed_at or self.now,
            self.now,
            target.value,
            reason,
        )
        self.tables.steps.append((claim.node_id, record))
        if keep_lease_s is None or retry_in_s or parked or not runs_on(before, item.state):
            return None
        item.attempts += 1
        item.lease_until = self.now + timedelta(seconds=keep_lease_s)
        item.claimed_at = self.now
        return self._claim_of(item)

    async def complete_wave(self, rollout_id: str, wave: int) -> WaveResult | None:
        found = self.tables.waves.get((rollout_id, wave))
        if found is None or found.completed:
            return None
        items = [
            i
            for _, i in sorted(self.tables.items.items())
            if i.rollout_id == rollout_id and i.wave == wave and i.kind == UPDATE
        ]
        if any(i.state not in TERMINAL for i in items):
            return None
        found.completed = True
        found.completed_at = self.now
        return WaveResult(
            rollout_id,
            wave,
            tuple(i.node_id for i in items if i.state is NodeStep.DONE),
            tuple(i.node_id for i in items if i.state is not NodeStep.DONE),
            found.correlation_id,
        )

    async def history(self, node_id: str, limit: int) -> list[StepRecord]:
        return [r for n, r in self.tables.steps if n == node_id][-limit:]

    async def completion_sent(self, rollout_id: str, wave: int, event_id: uuid.UUID) -> None:
        self.tables.waves[(rollout_id, wave)].completed_event = event_id

    async def unanswered_completions(
        self, after_s: float, max_redrives: int, limit: int
    ) -> list[Completion]:
        out = []
        for (rollout_id, number), w in sorted(
            self.tables.waves.items(), key=lambda kv: kv[1].completed_at or self.now
        ):
            moved = [t for t in (w.completed_at, w.redriven_at) if t is not None]
            last = max(moved) if moved else None
            later = any(r == rollout_id and n > number for r, n in self.tables.waves)
            if (
                w.completed_event is not None
                and last is not None
                and w.redrives < max_redrives
                and last <= self.now - timedelta(seconds=after_s * 2**w.redrives)
                and not later
                and rollout_id not in self.tables.halted
            ):
                out.append(Completion(rollout_id, number, w.completed_event, w.redrives))
        return out[:limit]

    async def redrive_completion(self, completion: Completion) -> bool:
        w = self.tables.waves[(completion.rollout_id, completion.wave)]
        w.redriven_at, w.redrives = self.now, w.redrives + 1
        self.tables.republished.append((completion.event_id, f"redrive-{w.redrives}"))
        return True
