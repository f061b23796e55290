"""The healthgate's state in PostgreSQL (schema from ``migrations/``): ``GateTx`` over one open
transaction, and ``PgGateStore`` opening them for the worker.

Samples go in by COPY (``copy_records_to_table``), one row per report with a column per signal,
one COPY per pulled batch: at the design load, 1,250 reports a second of about 15 readings each.
Readers get (node, metric, value, time) rows back by an unpivot in SQL.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Collection, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, date, datetime, timedelta
from typing import Any

import asyncpg

from lockstep_common.db import Conn
from lockstep_common.outbox import EventSink, pooled_emitting
from lockstep_common.stores import JoinedAt
from lockstep_gate.decision import GateDecision
from lockstep_gate.hard_rules import (
    BUSBW,
    BUSBW_EXPECTED,
    DCGM_DIAG,
    DEVICE_FAILED,
    GSP_INIT,
    HEARTBEAT,
    XID_PREFIX,
)
from lockstep_healthgate.adapters import partitions
from lockstep_healthgate.domain.readings import Columns, ColumnsBuilder
from lockstep_healthgate.domain.signals import (
    ECC_SBE,
    NVLINK_CRC,
    PCIE_REPLAY,
    POWER,
    ROW_REMAP,
    SM_CLOCK,
    TEMPERATURE,
    THROTTLED,
    XID_NONFATAL,
)
from lockstep_healthgate.domain.waves import Member, Wave, WaveState
from lockstep_healthgate.store import Claim, GateTx, SampleRow, VerdictRecord

# The signals stored as columns of health_samples (migrations/0001), in column order; XIDs by
# code go to xid_codes / xid_counts.
COLUMNS = (
    DCGM_DIAG,
    XID_NONFATAL,
    BUSBW,
    BUSBW_EXPECTED,
    SM_CLOCK,
    TEMPERATURE,
    POWER,
    THROTTLED,
    ECC_SBE,
    ROW_REMAP,
    PCIE_REPLAY,
    NVLINK_CRC,
    GSP_INIT,
    HEARTBEAT,
    DEVICE_FAILED,
)
_COLUMN = {name: i for i, name in enumerate(COLUMNS)}


def unpivot_sql(metrics: Collection[str] | None, *, skip: bool = False) -> str:
    """The query of a window's readings as (node, metric, value, time) rows, reading only the
    columns of ``metrics`` (None: all). Column names come from ``COLUMNS``, never from input;
    a NULL is a signal the report did not carry. XIDs are asked for by code as ``$4``; with
    ``skip``, reports in ``[$5, $6)`` (``[$4, $5)`` without XIDs) are left out."""
    columns = [c for c in COLUMNS if metrics is None or c in metrics]
    xids = metrics is None or any(
        m.startswith(XID_PREFIX) and m[len(XID_PREFIX) :].isdigit() for m in metrics
    )
    parts = []
    if columns:
        names = ",".join(columns)
        values = ", ".join(f"r.{c}" for c in columns)
        parts.append(f"SELECT * FROM unnest('{{{names}}}'::text[], ARRAY[{values}]) AS u(m, v)")
    if xids:
        parts.append(
            f"SELECT '{XID_PREFIX}' || c, v FROM unnest(r.xid_codes, r.xid_counts) AS x(c, v)"
            " WHERE $4::integer[] IS NULL OR c = ANY($4::integer[])"
        )
    gap = ""
    if skip:
        first = 5 if xids else 4
        gap = f" AND (r.observed_at < ${first} OR r.observed_at >= ${first + 1})"
    lateral = " UNION ALL ".join(parts) or "SELECT NULL::text, NULL::float8 WHERE false"
    return (
        "SELECT r.node_id, s.m, s.v, extract(epoch FROM r.observed_at)::float8"
        f" FROM health_samples r CROSS JOIN LATERAL ({lateral}) AS s(m, v)"
        " WHERE r.node_id = ANY($1::text[]) AND r.observed_at >= $2 AND r.observed_at <= $3"
        f" AND s.v IS NOT NULL{gap}"
    )


READ_CHUNK = 20_000  # readings held as Python rows at once by ``samples``
STRAGGLER_LOCK_KEY = 0x4C53_5354  # "LSST": the straggler evaluation's advisory lock
_WAVE = "rollout_id, wave, state, planned_at, completed_at, soak_seconds"
_VERDICT = "rollout_id, wave, kind, decision, window_start, window_end, policy_digest, event_id"


def verdict_of(row: Any) -> VerdictRecord:
    """A ``verdicts`` row as a record."""
    return VerdictRecord(
        rollout_id=row["rollout_id"],
        wave=row["wave"],
        kind=row["kind"],
        decision=GateDecision.model_validate_json(row["decision"]),
        window_start=row["window_start"],
        window_end=row["window_end"],
        policy_digest=row["policy_digest"],
        event_id=row["event_id"],
    )


async def read_stragglers(conn: Conn) -> list[dict[str, Any]]:
    """Each profile's last straggler finding (``drift.stragglers`` data), for readers outside
    the service (``lockstep fleet stragglers``)."""
    rows = await conn.fetch("SELECT finding FROM stragglers ORDER BY profile")
    return [json.loads(r["finding"]) for r in rows]


async def read_verdicts(conn: Conn, rollout_id: str, wave: int | None) -> list[VerdictRecord]:
    """A rollout's verdicts, for readers outside a handler (``lockstep gate show``)."""
    rows = await conn.fetch(
        f"SELECT {_VERDICT} FROM verdicts WHERE rollout_id = $1"
        " AND ($2::integer IS NULL OR wave = $2) ORDER BY wave",
        rollout_id,
        wave,
    )
    return [verdict_of(r) for r in rows]


class PgGateTx:
    """``GateTx`` over an open transaction; events go to ``sink`` (the consumer's context, or
    the worker's outbox emitter)."""

    def __init__(self, conn: Conn, sink: EventSink) -> None:
        self.conn = conn
        self._sink = sink

    @property
    def events(self) -> EventSink:
        """The outbox of this transaction."""
        return self._sink

    async def ensure_partitions(self, days: Collection[date]) -> None:
        """Create missing day partitions (one catalogue lookup per day in the batch)."""
        await partitions.ensure(self.conn, days)

    async def add_samples(self, rows: Sequence[SampleRow]) -> int:
        """COPY the readings in, one row per (time, node): a report's signals side by side."""
        if not rows:
            return 0
        records: dict[tuple[datetime, str], list[Any]] = {}
        width = len(COLUMNS)
        for r in rows:
            record = records.get((r.observed_at, r.node_id))
            if record is None:
                record = [r.observed_at, r.node_id, *([None] * width), [], []]
                records[r.observed_at, r.node_id] = record
            column = _COLUMN.get(r.metric)
            if column is not None:
                record[2 + column] = r.value
            elif r.metric.startswith(XID_PREFIX) and r.metric[len(XID_PREFIX) :].isdigit():
                record[-2].append(int(r.metric[len(XID_PREFIX) :]))
                record[-1].append(r.value)
            else:
                raise ValueError(f"health_samples has no column for signal {r.metric!r}")
        await self.conn.copy_records_to_table(
            partitions.PARENT,
            records=[tuple(rec) for rec in records.values()],
            columns=("observed_at", "node_id", *COLUMNS, "xid_codes", "xid_counts"),
        )
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
        """Readings of these nodes in the window, as columns; the names of those in ``skip``
        come from one ``DISTINCT`` read, their rows stay in the database."""
        codes = None
        if metrics is not None:
            codes = sorted(
                int(m[len(XID_PREFIX) :])
                for m in metrics
                if m.startswith(XID_PREFIX) and m[len(XID_PREFIX) :].isdigit()
            )
        args: list[Any] = [sorted(node_ids), since, until]
        if metrics is None or codes:
            args.append(codes)  # $4: the XID codes asked for (None: every code)
        builder = ColumnsBuilder()
        if skip is not None and max(since, skip[0]) < min(until, skip[1]):
            seen = await self.conn.fetch(
                f"SELECT DISTINCT u.node_id, u.m FROM ({unpivot_sql(metrics)}) AS u",
                *args[:1],
                max(since, skip[0]),
                min(until, skip[1]),
                *args[3:],
            )
            builder = ColumnsBuilder(sorted({r[0] for r in seen}), sorted({r[1] for r in seen}))
            args += [skip[0], skip[1]]
        else:
            skip = None
        # A cursor read in chunks, each coded into arrays at once: a whole-fleet wave's
        # baseline and soak are millions of readings, which as one list of records held the
        # service's peak memory at hundreds of MB (issue 13, item 6).
        cursor = await self.conn.cursor(unpivot_sql(metrics, skip=skip is not None), *args)
        while chunk := await cursor.fetch(READ_CHUNK):
            builder.extend((r[0], r[1], r[2], r[3]) for r in chunk)
            if len(chunk) < READ_CHUNK:
                break
        return builder.build()

    async def node_medians(
        self, metrics: Collection[str], since: datetime, until: datetime
    ) -> dict[str, dict[str, float]]:
        """Per-node medians (percentile_cont ignores the NULLs of reports without the signal),
        for nodes in no wave being updated or soaked."""
        columns = [c for c in COLUMNS if c in metrics]  # names from COLUMNS, never from input
        if not columns:
            return {}
        medians = ", ".join(f"percentile_cont(0.5) WITHIN GROUP (ORDER BY {c})" for c in columns)
        busy = ", ".join(f"'{s}'" for s in (WaveState.UPDATING, WaveState.SOAKING))
        rows = await self.conn.fetch(
            f"SELECT node_id, {medians} FROM health_samples"
            " WHERE observed_at >= $1 AND observed_at < $2 AND node_id NOT IN ("
            "  SELECT m.node_id FROM wave_members m JOIN waves w USING (rollout_id, wave)"
            f"  WHERE w.state IN ({busy}))"
            " GROUP BY node_id",
            since,
            until,
        )
        return {
            r[0]: {c: float(r[i + 1]) for i, c in enumerate(columns) if r[i + 1] is not None}
            for r in rows
        }

    async def take_straggler_turn(self) -> None:
        """A transaction-scoped advisory lock."""
        await self.conn.execute("SELECT pg_advisory_xact_lock($1)", STRAGGLER_LOCK_KEY)

    async def flagged(self, profile: str) -> frozenset[str] | None:
        """The last reported stragglers of the profile."""
        ids = await self.conn.fetchval(
            "SELECT node_ids FROM stragglers WHERE profile = $1", profile
        )
        return None if ids is None else frozenset(ids)

    async def save_flagged(
        self, profile: str, node_ids: Collection[str], finding: dict[str, Any], at: datetime
    ) -> None:
        """Upsert the profile's row."""
        await self.conn.execute(
            "INSERT INTO stragglers (profile, node_ids, finding, evaluated_at)"
            " VALUES ($1, $2, $3::jsonb, $4) ON CONFLICT (profile) DO UPDATE SET"
            " node_ids = excluded.node_ids, finding = excluded.finding,"
            " evaluated_at = excluded.evaluated_at",
            profile,
            sorted(node_ids),
            json.dumps(finding),
            at,
        )

    async def add_wave(self, wave: Wave) -> bool:
        """Insert the wave and its members (nothing when it exists)."""
        added = await self.conn.fetchval(
            "INSERT INTO waves (rollout_id, wave, state, planned_at, soak_seconds)"
            " VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING RETURNING true",
            wave.rollout_id,
            wave.wave,
            wave.state.value,
            wave.planned_at,
            wave.soak_seconds,
        )
        if not added:
            return False
        await self.conn.execute(
            "INSERT INTO wave_members (rollout_id, wave, node_id, stratum, canary)"
            " SELECT $1, $2, * FROM unnest($3::text[], $4::text[], $5::boolean[])",
            wave.rollout_id,
            wave.wave,
            [m.node_id for m in wave.members],
            [m.stratum for m in wave.members],
            [m.canary for m in wave.members],
        )
        return True

    async def _members(
        self, keys: Sequence[tuple[str, int]]
    ) -> dict[tuple[str, int], list[Member]]:
        rows = await self.conn.fetch(
            "SELECT m.rollout_id, m.wave, m.node_id, m.stratum, m.canary FROM wave_members m"
            " JOIN unnest($1::text[], $2::integer[]) AS k(rollout_id, wave)"
            " USING (rollout_id, wave) ORDER BY m.node_id",
            [k[0] for k in keys],
            [k[1] for k in keys],
        )
        out: dict[tuple[str, int], list[Member]] = {k: [] for k in keys}
        for r in rows:
            out[r["rollout_id"], r["wave"]].append(Member(r["node_id"], r["stratum"], r["canary"]))
        return out

    async def _waves(self, rows: Sequence[Any]) -> list[Wave]:
        keys = [(r["rollout_id"], r["wave"]) for r in rows]
        members = await self._members(keys)
        return [
            Wave(
                rollout_id=r["rollout_id"],
                wave=r["wave"],
                state=WaveState(r["state"]),
                planned_at=r["planned_at"],
                soak_seconds=r["soak_seconds"],
                members=tuple(members[r["rollout_id"], r["wave"]]),
                completed_at=r["completed_at"],
            )
            for r in rows
        ]

    async def wave(self, rollout_id: str, wave: int) -> Wave | None:
        """The wave, locked."""
        row = await self.conn.fetchrow(
            f"SELECT {_WAVE} FROM waves WHERE rollout_id = $1 AND wave = $2 FOR UPDATE",
            rollout_id,
            wave,
        )
        return None if row is None else (await self._waves([row]))[0]

    async def set_state(
        self,
        rollout_id: str,
        wave: int,
        state: WaveState,
        *,
        completed_at: datetime | None = None,
    ) -> None:
        """Move the wave; ``completed_at`` when given."""
        await self.conn.execute(
            "UPDATE waves SET state = $3, completed_at = coalesce($4, completed_at)"
            " WHERE rollout_id = $1 AND wave = $2",
            rollout_id,
            wave,
            state.value,
            completed_at,
        )

    async def open_waves(
        self, node_ids: Collection[str], rollout_id: str | None = None
    ) -> list[Wave]:
        """Open waves with these nodes as members."""
        rows = await self.conn.fetch(
            f"SELECT {_WAVE} FROM waves w WHERE state IN ('updating', 'soaking')"
            " AND ($2::text IS NULL OR rollout_id = $2) AND EXISTS (SELECT 1 FROM wave_members m"
            " WHERE m.rollout_id = w.rollout_id AND m.wave = w.wave"
            " AND m.node_id = ANY($1::text[])) ORDER BY rollout_id, wave",
            sorted(node_ids),
            rollout_id,
        )
        return await self._waves(rows)

    async def soaking_waves(self) -> list[Wave]:
        """Every soaking wave."""
        rows = await self.conn.fetch(
            f"SELECT {_WAVE} FROM waves WHERE state = 'soaking' ORDER BY rollout_id, wave"
        )
        return await self._waves(rows)

    async def open_waves_of(self, rollout_id: str) -> list[Wave]:
        """A rollout's open waves."""
        rows = await self.conn.fetch(
            f"SELECT {_WAVE} FROM waves WHERE rollout_id = $1"
            " AND state IN ('updating', 'soaking') ORDER BY wave FOR UPDATE",
            rollout_id,
        )
        return await self._waves(rows)

    async def save_verdict(self, record: VerdictRecord) -> bool:
        """Insert unless the wave has a verdict."""
        d = record.decision
        saved = await self.conn.fetchval(
            "INSERT INTO verdicts (rollout_id, wave, verdict, kind, reason, decision,"
            " evaluated_at, window_start, window_end, policy_digest, event_id)"
            " VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8, $9, $10, $11)"
            " ON CONFLICT DO NOTHING RETURNING true",
            record.rollout_id,
            record.wave,
            d.verdict.value,
            record.kind,
            d.reason,
            json.dumps(d.model_dump(mode="json")),
            datetime.fromtimestamp(d.evaluated_at, UTC),
            record.window_start,
            record.window_end,
            record.policy_digest,
            record.event_id,
        )
        return bool(saved)

    async def verdicts(self, rollout_id: str, wave: int | None = None) -> list[VerdictRecord]:
        """A rollout's verdicts."""
        return await read_verdicts(self.conn, rollout_id, wave)

    async def claim_due(self, now: datetime, grace_s: float, lease_s: float) -> Claim | None:
        """``FOR UPDATE SKIP LOCKED``: replicas claim different waves."""
        row = await self.conn.fetchrow(
            "SELECT rollout_id, wave FROM waves WHERE state = 'soaking'"
            " AND completed_at + make_interval(secs => soak_seconds + $2) <= $1"
            " AND (lease_until IS NULL OR lease_until < $1)"
            " ORDER BY completed_at + make_interval(secs => soak_seconds), rollout_id, wave"
            " LIMIT 1 FOR UPDATE SKIP LOCKED",
            now,
            grace_s,
        )
        if row is None:
            return None
        claimed = await self.conn.fetchrow(
            "UPDATE waves SET lease_token = lease_token + 1, attempts = attempts + 1,"
            " lease_until = $3 WHERE rollout_id = $1 AND wave = $2"
            " RETURNING lease_token, attempts",
            row["rollout_id"],
            row["wave"],
            now + timedelta(seconds=lease_s),
        )
        assert claimed is not None  # noqa: S101 - the row is locked by the SELECT above
        return Claim(row["rollout_id"], row["wave"], claimed["lease_token"], claimed["attempts"])

    async def still_holds(self, claim: Claim) -> bool:
        """Lock the wave and compare tokens."""
        token = await self.conn.fetchval(
            "SELECT lease_token FROM waves WHERE rollout_id = $1 AND wave = $2 FOR UPDATE",
            claim.rollout_id,
            claim.wave,
        )
        return bool(token == claim.token)


class PgGateStore:
    """Opens ``PgGateTx`` transactions on a pool, with an outbox emitter (the worker's)."""

    def __init__(self, pool: asyncpg.Pool, source: str) -> None:
        self._pool = pool
        self._source = source

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[GateTx]:
        """One transaction on a pooled connection."""
        async with pooled_emitting(self._pool, self._source) as emitter:
            yield PgGateTx(emitter.conn, emitter)


joined = JoinedAt(PgGateTx)
"""``joined(handler)`` / ``joined.batch(handler)``: ``handler`` run in the consumer runtime's
transaction (its inbox claim and outbox), with ``now`` from the system clock."""
