"""The agent's reports on disk until JetStream acknowledges them: ``Spool``.

A report is written here before it is published and deleted only once JetStream acknowledged
it, so neither a NATS outage nor an agent restart (a crash, an upgrade, a reboot) loses one.
Each report keeps the message id it was made with: a retry carries the same ``Nats-Msg-Id``,
and the stream's duplicate window stores it once.

The spool is bounded (``limit`` reports): when it is full the oldest report is dropped and
counted (``dropped``, kept across restarts): telemetry is worth less the older it gets, and an
agent must not fill a node's disk during a long outage.

The spool also keeps the agent's small state (``state``: the XID cursor, the report sequence)
and writes it in the same transaction as the reports that carry it: the XIDs counted in a
stored report are never counted again after a restart, and never lost before one.

SQLite (stdlib), one file, opened with ``synchronous=FULL`` so a committed report survives a
power cut (SQLite "PRAGMA synchronous"); mode 0600 in a 0700 directory (reports name the node's
hardware, nobody else's business).
"""

from __future__ import annotations

import os
import sqlite3
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

_SCHEMA = """
CREATE TABLE IF NOT EXISTS reports (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    msg_id  TEXT NOT NULL UNIQUE,
    subject TEXT NOT NULL,
    payload BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS state (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
_DROPPED = "dropped"


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One report as it goes on the wire, the same bytes and id on every retry."""

    subject: str
    payload: bytes
    msg_id: str


class ReportBuffer(Protocol):
    """Where reports wait for their acknowledgement: the contract ``Spool`` (on disk, a real
    node) and ``MemorySpool`` (in memory, a simulated node) both keep, and the contract test
    (tests/unit/agent/test_spool.py) runs on both."""

    limit: int

    def put(self, reports: Iterable[Outgoing], state: Mapping[str, str] | None = None) -> int:
        """Store reports and state at once; the number of oldest reports dropped."""
        ...

    def pending(self, limit: int | None = None) -> list[Outgoing]:
        """Stored reports, oldest first."""
        ...

    def acked(self, msg_ids: Iterable[str]) -> None:
        """Forget acknowledged reports."""
        ...

    def __len__(self) -> int: ...

    @property
    def dropped(self) -> int:
        """Reports dropped because the buffer was full."""
        ...

    def state(self, key: str) -> str | None:
        """One stored state value."""
        ...


class SpoolError(RuntimeError):
    """The spool file cannot be used (one line naming it)."""


class Spool:
    """Reports waiting for JetStream's acknowledgement, oldest first, on disk.

    Args:
        path: the SQLite file (created, mode 0600, with its directory, mode 0700).
        limit: the most reports kept; beyond it the oldest are dropped and counted.
    """

    def __init__(self, path: Path, limit: int) -> None:
        if limit <= 0:
            raise ValueError(f"spool limit must be > 0, got {limit}")
        self.path = path
        self.limit = limit
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            if not path.exists():
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
            # One connection, used by one task at a time (the cycle runs in a worker thread).
            self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(_SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise SpoolError(f"spool {path}: {exc}") from None

    def close(self) -> None:
        self._db.close()

    def put(self, reports: Iterable[Outgoing], state: Mapping[str, str] | None = None) -> int:
        """Store ``reports`` (and ``state``) in one transaction; return how many old reports
        were dropped to stay within ``limit``. A report whose id is stored already is kept
        once."""
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            db.executemany(
                # Only a repeated id is skipped (OR IGNORE would also skip a NOT NULL violation).
                "INSERT INTO reports (msg_id, subject, payload) VALUES (?, ?, ?) "
                "ON CONFLICT (msg_id) DO NOTHING",
                [(r.msg_id, r.subject, r.payload) for r in reports],
            )
            for key, value in (state or {}).items():
                db.execute("INSERT OR REPLACE INTO state (key, value) VALUES (?, ?)", (key, value))
            (count,) = db.execute("SELECT count(*) FROM reports").fetchone()
            over = max(0, count - self.limit)
            if over:
                db.execute(
                    "DELETE FROM reports WHERE id IN (SELECT id FROM reports ORDER BY id LIMIT ?)",
                    (over,),
                )
                db.execute(
                    "INSERT INTO state (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE "
                    "SET value = CAST(value AS INTEGER) + excluded.value",
                    (_DROPPED, str(over)),
                )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return int(over)

    def pending(self, limit: int | None = None) -> list[Outgoing]:
        """The stored reports, oldest first (at most ``limit``)."""
        rows = self._db.execute(
            "SELECT subject, payload, msg_id FROM reports ORDER BY id LIMIT ?",
            (-1 if limit is None else limit,),
        ).fetchall()
        return [Outgoing(s, bytes(p), m) for s, p, m in rows]

    def acked(self, msg_ids: Iterable[str]) -> None:
        """Forget reports JetStream acknowledged."""
        self._db.executemany("DELETE FROM reports WHERE msg_id = ?", [(m,) for m in msg_ids])

    def __len__(self) -> int:
        (count,) = self._db.execute("SELECT count(*) FROM reports").fetchone()
        return int(count)

    @property
    def dropped(self) -> int:
        """Reports dropped unsent because the spool was full, since it was created."""
        value = self.state(_DROPPED)
        return int(value) if value is not None else 0

    def state(self, key: str) -> str | None:
        """One value of the agent's state, None when never stored."""
        row = self._db.execute("SELECT value FROM state WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])


class MemorySpool:
    """``ReportBuffer`` in memory: a simulated node's (a simulator runs thousands; a restart
    of the simulator is a restart of its nodes' agents, which start empty)."""

    def __init__(self, limit: int) -> None:
        if limit <= 0:
            raise ValueError(f"spool limit must be > 0, got {limit}")
        self.limit = limit
        self._reports: OrderedDict[str, Outgoing] = OrderedDict()
        self._state: dict[str, str] = {}
        self._dropped = 0

    def put(self, reports: Iterable[Outgoing], state: Mapping[str, str] | None = None) -> int:
        batch = list(reports)  # checked whole before anything changes, as one transaction
        if any(not isinstance(r.payload, bytes) for r in batch):
            raise TypeError("a report's payload must be bytes")
        for r in batch:
            self._reports.setdefault(r.msg_id, r)
        self._state.update(state or {})
        over = max(0, len(self._reports) - self.limit)
        for _ in range(over):
            self._reports.popitem(last=False)  # the oldest report is worth the least
        self._dropped += over
        return over

    def pending(self, limit: int | None = None) -> list[Outgoing]:
        out = list(self._reports.values())
        return out if limit is None else out[:limit]

    def acked(self, msg_ids: Iterable[str]) -> None:
        for m in msg_ids:
            self._reports.pop(m, None)

    def __len__(self) -> int:
        return len(self._reports)

    @property
    def dropped(self) -> int:
        return self._dropped

    def state(self, key: str) -> str | None:
        return self._state.get(key)
