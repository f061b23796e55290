"""The outbox relay: publishes committed outbox rows to JetStream, at least once.

Each pass claims up to ``batch`` due rows with ``FOR UPDATE SKIP LOCKED`` (several relays may
run), publishes them pipelined with ``Nats-Msg-Id = event_id``, and marks what the server
acknowledged, all in one transaction. A relay killed between publish and mark leaves the rows
unmarked; the next pass publishes them again and JetStream's duplicate window drops the copies,
which is why the window must exceed the relay's longest retry backoff (checked in settings).
Failures back off per row (``next_attempt_at``) and the loop itself backs off on database or
NATS outages, so it never spins hot.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from dataclasses import dataclass
from typing import Any

import asyncpg
from asyncpg.pool import PoolConnectionProxy
from nats.js import JetStreamContext

from lockstep_common.backoff import Backoff
from lockstep_common.db import OUTAGE, pooled_transaction
from lockstep_common.envelope import MSG_ID_HEADER
from lockstep_common.errors import describe
from lockstep_common.observability import Metrics
from lockstep_common.subjects import Namespace

log = logging.getLogger(__name__)

_CLAIM = (
    "SELECT id, event_id, subject, payload, headers, attempts FROM outbox"
    " WHERE published_at IS NULL AND next_attempt_at <= now()"
    " ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED"
)
_MARK = (
    "UPDATE outbox SET published_at = now(), attempts = attempts + 1 WHERE id = ANY($1::bigint[])"
)
_FAIL = (
    "UPDATE outbox SET attempts = attempts + 1, last_error = $2,"
    " next_attempt_at = now() + make_interval(secs => $3) WHERE id = ANY($1::bigint[])"
)


@dataclass(frozen=True, slots=True)
class RelayConfig:
    """How the relay paces itself."""

    schema: str
    batch: int = 512
    poll_s: float = 1.0
    publish_timeout_s: float = 5.0
    retry_horizon_s: float = 300.0
    retention_s: float = 86_400.0


class OutboxRelay:
    """Moves committed outbox rows to JetStream; one instance per service process."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        js: JetStreamContext,
        namespace: Namespace,
        config: RelayConfig,
        metrics: Metrics,
    ) -> None:
        self._pool = pool
        self._js = js
        self._ns = namespace
        self.config = config
        self._metrics = metrics
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self._listen_conn: PoolConnectionProxy[asyncpg.Record] | None = None

    def wake(self) -> None:
        """Ask for a pass now (also triggered by the outbox's NOTIFY)."""
        self._wake.set()

    def stop(self) -> None:
        """Finish the current pass, then return from ``run``."""
        self._stopping.set()
        self._wake.set()

    async def run(self) -> None:
        """Relay until stopped."""
        failures = 0
        await self._listen()
        try:
            while not self._stopping.is_set():
                try:
                    published = await self.relay_once()
                    failures = 0
                except OUTAGE as exc:
                    failures += 1
                    delay = Backoff(0.2, self.config.poll_s * 10).delay(failures)
                    log.warning(
                        "outbox relay pass failed, retrying in %.1fs: %s", delay, describe(exc)
                    )
                    await self._sleep(delay)
                    await self._listen()
                    continue
                if published < self.config.batch:
                    await self._sleep(self.config.poll_s)
        finally:
            await self._unlisten()

    async def relay_once(self) -> int:
        """One pass: claim, publish, mark. Returns how many rows were claimed."""
        async with pooled_transaction(self._pool) as conn:
            rows = await conn.fetch(_CLAIM, self.config.batch)
            if not rows:
                return 0
            ok, failed = await self._publish(rows)
            if ok:
                await conn.execute(_MARK, ok)
            for error, (ids, attempts) in failed.items():
                delay = Backoff(1.0, self.config.retry_horizon_s).delay(attempts)
                await conn.execute(_FAIL, ids, error[:1000], delay)
        self._metrics.outbox_published.inc(len(ok))
        if failed:
            count = sum(len(ids) for ids, _ in failed.values())
            self._metrics.outbox_publish_errors.inc(count)
            log.warning(
                "outbox relay: %d of %d publishes failed: %s", count, len(rows), list(failed)
            )
        return len(rows)

    async def _publish(
        self, rows: list[asyncpg.Record]
    ) -> tuple[list[int], dict[str, tuple[list[int], int]]]:
        # Pipelined publishes on one connection reach the server in row order, so events of
        # one subject keep their order unless a publish fails and is retried later.
        futures: list[asyncio.Future[Any]] = []
        for row in rows:
            headers = {MSG_ID_HEADER: str(row["event_id"])}
            if row["headers"]:
                headers.update(_decode_headers(row["headers"]))
            try:
                fut = await self._js.publish_async(
                    self._ns.wire(row["subject"]), row["payload"], headers=headers
                )
            except Exception as exc:  # noqa: BLE001 - any client error fails this row, not the relay
                fut = asyncio.get_running_loop().create_future()
                fut.set_exception(exc)
            futures.append(fut)
        done, pending = await asyncio.wait(futures, timeout=self.config.publish_timeout_s)
        for f in pending:
            f.cancel()
        ok: list[int] = []
        failed: dict[str, tuple[list[int], int]] = {}
        for row, fut in zip(rows, futures, strict=True):
            error = _error_of(fut) if fut in done else "publish acknowledgement timed out"
            if error is None:
                ok.append(row["id"])
                if getattr(fut.result(), "duplicate", False):
                    self._metrics.outbox_duplicates.inc()
            else:
                ids, attempts = failed.setdefault(error, ([], row["attempts"]))
                ids.append(row["id"])
                failed[error] = (ids, max(attempts, row["attempts"]))
        return ok, failed

    async def purge(self) -> int:
        """Delete rows published longer ago than the retention; returns how many."""
        async with self._pool.acquire() as conn:
            result: str = await conn.execute(
                "DELETE FROM outbox WHERE published_at < now() - make_interval(secs => $1)",
                self.config.retention_s,
            )
        return int(result.rsplit(" ", 1)[-1])

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout=seconds)
        self._wake.clear()

    async def _listen(self) -> None:
        await self._unlisten()
        try:
            conn = await self._pool.acquire()
            await conn.add_listener(f"{self.config.schema}_outbox", self._on_notify)
            self._listen_conn = conn
        except OUTAGE as exc:
            log.warning("outbox relay cannot LISTEN (falling back to polling): %s", exc)

    async def _unlisten(self) -> None:
        conn, self._listen_conn = self._listen_conn, None
        if conn is None:
            return
        with contextlib.suppress(*OUTAGE):
            await conn.remove_listener(f"{self.config.schema}_outbox", self._on_notify)
        with contextlib.suppress(OSError, asyncpg.InterfaceError):
            await self._pool.release(conn)

    def _on_notify(self, *_: object) -> None:
        self._wake.set()


def _error_of(fut: asyncio.Future[Any]) -> str | None:
    if fut.cancelled():
        return "publish cancelled"
    exc = fut.exception()
    return None if exc is None else f"{type(exc).__name__}: {exc}"


def _decode_headers(raw: str | dict[str, str]) -> dict[str, str]:
    value = json.loads(raw) if isinstance(raw, str) else raw
    return {str(k): str(v) for k, v in value.items()}
