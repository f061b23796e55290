"""An in-memory ``GateStore`` for unit tests of the handlers and the worker (no PostgreSQL).

It keeps the PostgreSQL store's semantics (adapters/pg_store.py): one wave per (rollout, wave)
and one verdict per wave, the first kept; claims take the soaking wave whose soak ended longest
ago, bump the fencing token and count an attempt; a transaction's changes and events commit
together when its block ends and vanish if it raises. Committed events are in ``emitted``.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections import defaultdict
from collections.abc import AsyncIterator, Collection, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any

from lockstep_common.envelope import Envelope, EventData, source_of
from lockstep_common.outbox import EventSink
from lockstep_common.testing import RecordedEvents
from lockstep_healthgate.domain.readings import Columns, ColumnsBuilder
from lockstep_healthgate.domain.waves import OPEN, Wave, WaveState
from lockstep_healthgate.store import Claim, GateTx, SampleRow, VerdictRecord


@dataclass(slots=True)
class _Lease:
    token: int = 0
    attempts: int = 0
    until: datetime | None = None


@dataclass(slots=True)
class _Tables:
    # Rows are frozen and replaced on change, so shallow copies are a snapshot to roll back to.
    samples: list[SampleRow] = field(default_factory=list)
    waves: dict[tuple[str, int], Wave] = field(default_factory=dict)
    leases: dict[tuple[str, int], _Lease] = field(default_factory=dict)
    verdicts: dict[tuple[str, int], VerdictRecord] = field(default_factory=dict)
    days: set[date] = field(default_factory=set)
    stragglers: dict[str, frozenset[str]] = field(default_factory=dict)
    findings: dict[str, dict[str, Any]] = field(default_factory=dict)

    def copy(self) -> _Tables:
        return _Tables(
            list(self.samples),
            dict(self.waves),
            {k: dataclasses.replace(v) for k, v in self.leases.items()},
            dict(self.verdicts),
            set(self.days),
            dict(self.stragglers),
            dict(self.findings),
        )


class MemoryGateTx:
    """``GateTx`` over the in-memory tables."""

    def __init__(self, tables: _Tables, sink: RecordedEvents) -> None:
        self.t = tables
        self._sink = sink

    @property
    def events(self) -> EventSink:
        """Events of this transaction."""
        return self._sink

    async def ensure_partitions(self, days: Collection[date]) -> None:
        """Remember the days (tests read ``days``)."""
        self.t.days |= set(days)

    async def add_samples(self, rows: Sequence[SampleRow]) -> int:
        """Append."""
        self.t.samples.extend(rows)
        return len(rows)

    async def samples(
        self,
        node_ids: Collection[str],
        metrics: Collection[str] | None,
        since: datetime,
        until: datetime,
        *,
        skip: tuple[datetime, datetime] | None = None,
    ) -> Columns:
        """Filter."""
        nodes = set(node_ids)
        chosen = [
            r
            for r in self.t.samples
            if r.node_id in nodes
            and (metrics is None or r.metric in metrics)
            and since <= r.observed_at <= until
        ]
        skipped = [r for r in chosen if skip is not None and skip[0] <= r.observed_at < skip[1]]
        builder = ColumnsBuilder(
            sorted({r.node_id for r in skipped}), sorted({r.metric for r in skipped})
        )
        builder.extend(
            (r.node_id, r.metric, r.value, r.observed_at.timestamp())
            for r in chosen
            if not (skip is not None and skip[0] <= r.observed_at < skip[1])
        )
        return builder.build()

    async def node_medians(
        self, metrics: Collection[str], since: datetime, until: datetime
    ) -> dict[str, dict[str, float]]:
        """Medians of the window's readings, nodes of updating or soaking waves left out."""
        busy = {
            n
            for w in self.t.waves.values()
            if w.state in (WaveState.UPDATING, WaveState.SOAKING)
            for n in (m.node_id for m in w.members)
        }
        values: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        for r in self.t.samples:
            if r.metric in metrics and since <= r.observed_at < until and r.node_id not in busy:
                values[r.node_id][r.metric].append(r.value)
        return {
            n: {m: statistics.median(v) for m, v in by_metric.items()}
            for n, by_metric in values.items()
        }

    async def take_straggler_turn(self) -> None:
        """One process: nothing to wait for."""

    async def flagged(self, profile: str) -> frozenset[str] | None:
        """Last reported."""
        return self.t.stragglers.get(profile)

    async def save_flagged(
        self, profile: str, node_ids: Collection[str], finding: dict[str, Any], at: datetime
    ) -> None:
        """Replace."""
        self.t.stragglers[profile] = frozenset(node_ids)
        self.t.findings[profile] = finding

    async def add_wave(self, wave: Wave) -> bool:
        """Keep the first."""
        key = (wave.rollout_id, wave.wave)
        if key in self.t.waves:
            return False
        self.t.waves[key] = wave
        self.t.leases[key] = _Lease()
        return True

    async def wave(self, rollout_id: str, wave: int) -> Wave | None:
        """Look up."""
        return self.t.waves.get((rollout_id, wave))

    async def set_state(
        self,
        rollout_id: str,
        wave: int,
        state: WaveState,
        *,
        completed_at: datetime | None = None,
    ) -> None:
        """Replace the row."""
        key = (rollout_id, wave)
        old = self.t.waves[key]
        self.t.waves[key] = dataclasses.replace(
            old, state=state, completed_at=completed_at or old.completed_at
        )

    async def open_waves(
        self, node_ids: Collection[str], rollout_id: str | None = None
    ) -> list[Wave]:
        """Scan."""
        nodes = set(node_ids)
        return [
            w
            for k, w in sorted(self.t.waves.items())
            if w.state in OPEN
            and (rollout_id is None or w.rollout_id == rollout_id)
            and any(m.node_id in nodes for m in w.members)
        ]

    async def soaking_waves(self) -> list[Wave]:
        """Scan."""
        return [w for _, w in sorted(self.t.waves.items()) if w.state is WaveState.SOAKING]

    async def open_waves_of(self, rollout_id: str) -> list[Wave]:
        """Scan."""
        return [
            w
            for _, w in sorted(self.t.waves.items())
            if w.rollout_id == rollout_id and w.state in OPEN
        ]

    async def save_verdict(self, record: VerdictRecord) -> bool:
        """Keep the first."""
        key = (record.rollout_id, record.wave)
        if key in self.t.verdicts:
            return False
        self.t.verdicts[key] = record
        return True

    async def verdicts(self, rollout_id: str, wave: int | None = None) -> list[VerdictRecord]:
        """Filter."""
        return [
            v
            for (r, n), v in sorted(self.t.verdicts.items())
            if r == rollout_id and (wave is None or n == wave)
        ]

    async def claim_due(self, now: datetime, grace_s: float, lease_s: float) -> Claim | None:
        """The soaking wave due longest ago whose lease is free."""
        due = [
            (w.due_at, k)
            for k, w in self.t.waves.items()
            if w.state is WaveState.SOAKING
            and w.due_at is not None
            and w.due_at + timedelta(seconds=grace_s) <= now
            and ((lease := self.t.leases[k]).until is None or lease.until < now)
        ]
        if not due:
            return None
        _, key = min(due)
        lease = self.t.leases[key]
        lease.token += 1
        lease.attempts += 1
        lease.until = now + timedelta(seconds=lease_s)
        return Claim(key[0], key[1], lease.token, lease.attempts)

    async def still_holds(self, claim: Claim) -> bool:
        """Compare tokens."""
        return self.t.leases[claim.rollout_id, claim.wave].token == claim.token


class MemoryGateStore:
    """The tables, and transactions over them."""

    def __init__(self) -> None:
        self.tables = _Tables()
        self.emitted: list[tuple[str, Envelope[EventData]]] = []

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[GateTx]:
        """Commit on success, roll back (tables and events) on an exception."""
        snapshot = self.tables.copy()
        sink = RecordedEvents(source_of("healthgate"))
        try:
            yield MemoryGateTx(self.tables, sink)
        except BaseException:
            self.tables = snapshot
            raise
        self.emitted.extend(sink.emitted)

    @property
    def events(self) -> list[EventData]:
        """Committed event payloads, in order."""
        return [env.data for _, env in self.emitted]
