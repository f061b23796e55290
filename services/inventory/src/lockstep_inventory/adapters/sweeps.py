"""The ``sweeps`` table: one row per Redfish sweep, its progress and outcome."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from lockstep_common.db import Conn

# One sweeper at a time across replicas and CLI runs: a session-level advisory lock held on a
# dedicated connection for the whole sweep (released by PostgreSQL if that connection dies).
# Its key derives from the schema (the search_path of every inventory connection), so two
# deployments or test namespaces sharing a database do not wait on each other; non-negative so
# pg_locks' (classid << 32 | objid) reads it back unchanged.
SWEEP_LOCK_KEY = (
    "(hashtextextended('lockstep-sweep:' || current_schema(), 0) & 9223372036854775807)"
)


@dataclass(frozen=True, slots=True)
class SweepRow:
    """A sweep as recorded."""

    id: int
    started_at: dt.datetime
    finished_at: dt.datetime | None
    total: int
    done: int
    unreadable: int
    expanded: int
    error: str | None
    by: str


async def start(conn: Conn, total: int, by: str) -> SweepRow:
    """Record a new sweep (its id is the sequence of the reports it produces); close any sweep
    left open by a sweeper that died, which the caller's lock proves is not running."""
    await conn.execute(
        "UPDATE sweeps SET finished_at = now(), error = 'abandoned: the sweeper stopped'"
        " WHERE finished_at IS NULL"
    )
    row = await conn.fetchrow(
        "INSERT INTO sweeps (total, by) VALUES ($1, $2) RETURNING *", total, by
    )
    if row is None:
        raise RuntimeError("INSERT INTO sweeps returned no row")
    return SweepRow(**dict(row))


async def progress(conn: Conn, sweep_id: int, done: int, unreadable: int, expanded: int) -> None:
    """Add a committed chunk's counts."""
    await conn.execute(
        "UPDATE sweeps SET done = done + $2, unreadable = unreadable + $3,"
        " expanded = expanded + $4 WHERE id = $1",
        sweep_id,
        done,
        unreadable,
        expanded,
    )


async def finish(conn: Conn, sweep_id: int, error: str | None = None) -> None:
    """Mark the sweep finished (with the error that ended it, if any)."""
    await conn.execute(
        "UPDATE sweeps SET finished_at = now(), error = $2 WHERE id = $1", sweep_id, error
    )


async def lock_held(conn: Conn) -> bool:
    """True while some session holds this schema's sweep lock (a sweeper is at work)."""
    return bool(
        await conn.fetchval(
            "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            f" AND ((classid::bigint << 32) | objid::bigint) = {SWEEP_LOCK_KEY}"
            " AND objsubid = 1)"
        )
    )


async def latest(conn: Conn) -> SweepRow | None:
    """The newest sweep, finished or not."""
    row = await conn.fetchrow("SELECT * FROM sweeps ORDER BY id DESC LIMIT 1")
    return SweepRow(**dict(row)) if row is not None else None


async def last_finished(conn: Conn) -> SweepRow | None:
    """The newest sweep that finished without error."""
    row = await conn.fetchrow(
        "SELECT * FROM sweeps WHERE finished_at IS NOT NULL AND error IS NULL"
        " ORDER BY id DESC LIMIT 1"
    )
    return SweepRow(**dict(row)) if row is not None else None
