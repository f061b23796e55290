"""Writing events to the transactional outbox: the one way Lockstep code emits an event.

Handlers, workers and admin commands all emit through an :class:`Emitter` bound to the
transaction that changes state, so the events commit, or vanish, with it (the transactional
outbox, research/reliability.md section 4). Consumers get one as their ``HandlerContext``;
anything else opens one with :func:`emitting`. The relay (``relay.py``) publishes them
afterwards with ``Nats-Msg-Id`` = event id.
"""

from __future__ import annotations

import json
import uuid
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from lockstep_common.db import Conn, pooled_transaction
from lockstep_common.envelope import MSG_ID_HEADER, Envelope, EventData, make_envelope
from lockstep_common.errors import PermanentError, TransientError


@dataclass(frozen=True, slots=True)
class OutboxMessage:
    """One row to publish: a logical subject, a body and the id JetStream dedups on."""

    event_id: uuid.UUID
    subject: str
    payload: bytes
    headers: dict[str, str] | None = None

    @classmethod
    def of(cls, subject: str, envelope: Envelope[EventData]) -> OutboxMessage:
        """An event in its CloudEvents JSON form."""
        return cls(envelope.event_id, subject, envelope.to_json())


class OutboxConflict(PermanentError):
    """An event id already in the outbox for another event: the insert that met it is refused
    and its transaction rolls back, so the event it carried can never vanish in silence."""


async def enqueue(conn: Conn, messages: Sequence[OutboxMessage]) -> int:
    """Insert messages in the caller's transaction; returns how many were new.

    A message whose ``event_id`` is already in the outbox with the same subject and body is
    skipped, so a handler that runs twice (say, after a crash before its commit was
    acknowledged) cannot emit twice. One whose id is there with another subject or body is
    not the same event: skipping it would drop it unseen (a row written under an id someone
    predicted made a genuine ``gate.tripped`` vanish, issue 26), so it raises.

    Raises:
        OutboxConflict: an id is taken by another event; nothing of this call is kept, and the
            caller's transaction must not commit (the exception ends it).
    """
    if not messages:
        return 0
    if not conn.is_in_transaction():
        raise RuntimeError("outbox.enqueue must run inside the transaction of the state change")
    ids = [m.event_id for m in messages]
    inserted = await conn.fetch(
        "INSERT INTO outbox (event_id, subject, payload, headers)"
        " SELECT * FROM unnest($1::uuid[], $2::text[], $3::bytea[], $4::jsonb[])"
        " ON CONFLICT (event_id) DO NOTHING RETURNING event_id",
        ids,
        [m.subject for m in messages],
        [m.payload for m in messages],
        [json.dumps(m.headers) if m.headers else None for m in messages],
    )
    new = {r["event_id"] for r in inserted}
    if len(new) < len(messages):
        await _same_or_refuse([m for m in messages if m.event_id not in new], conn)
    return len(new)


async def _same_or_refuse(skipped: Sequence[OutboxMessage], conn: Conn) -> None:
    """Raise unless every skipped message is byte for byte the event stored under its id.

    Read in a statement of its own: under READ COMMITTED it sees a row that a concurrent
    transaction committed while the insert waited on it (PostgreSQL 13.2.1)."""
    rows = await conn.fetch(
        "SELECT event_id, subject, payload FROM outbox WHERE event_id = ANY($1::uuid[])",
        [m.event_id for m in skipped],
    )
    stored = {r["event_id"]: (r["subject"], bytes(r["payload"])) for r in rows}
    for m in skipped:
        held = stored.get(m.event_id)
        if held is None:  # purged between the two statements: try the whole transaction again
            raise TransientError(f"outbox row {m.event_id} vanished while it was compared")
        if held != (m.subject, m.payload):
            raise OutboxConflict(
                f"event id {m.event_id} is already in the outbox for another event "
                f"(on {held[0]}); refusing to drop the event for {m.subject}",
                event_id=str(m.event_id),
            )


async def republish(conn: Conn, event_id: uuid.UUID, attempt: str) -> bool:
    """Publish a committed event again, in the caller's transaction; False when the outbox no
    longer holds it (purged after ``outbox_retention_s``: emit it anew with its ``event_id``).

    For a level-triggered re-drive: an event the broker acknowledged and then lost (a message
    the server never fsynced, reliability.md 1.6 and test plan A4) is not in the stream for a
    consumer that had not taken it yet. The copy keeps the event's id and body, which every
    consumer's inbox dedupes on, so a consumer that did apply it drops it; it goes out under
    the ``Nats-Msg-Id`` ``<event id>/<attempt>``, or JetStream's duplicate window would take
    it for the first publish and not store it.
    """
    if not conn.is_in_transaction():
        raise RuntimeError("outbox.republish must run inside the transaction that decides it")
    result: str = await conn.execute(
        "UPDATE outbox SET published_at = NULL, next_attempt_at = now(), last_error = NULL,"
        " headers = coalesce(headers, '{}'::jsonb) || jsonb_build_object($2::text, $3::text)"
        " WHERE event_id = $1",
        event_id,
        MSG_ID_HEADER,
        f"{event_id}/{attempt}",
    )
    return result.rsplit(" ", 1)[-1] != "0"


class EventSink(ABC):
    """The one way to emit an event: :meth:`emit` wraps a payload in its envelope and hands it to
    the sink. :class:`Emitter` is the sink of a service (the outbox of the open transaction);
    ``lockstep_common.testing.RecordedEvents`` keeps the events in memory for unit tests.
    Code that only emits takes an ``EventSink``.

    Args:
        source: the CloudEvents ``source`` of everything emitted here (``envelope.source_of``).
    """

    __slots__ = ("source",)

    def __init__(self, source: str) -> None:
        self.source = source

    def emit(
        self,
        subject: str,
        data: EventData,
        *,
        about: str | None = None,
        correlation_id: str | None = None,
        event_id: uuid.UUID | None = None,
        occurred_at: datetime | None = None,
    ) -> Envelope[EventData]:
        """Queue ``data`` for ``subject``; returns its envelope.

        ``about`` is the CloudEvents ``subject`` (what the event is about, e.g. a node id).
        Give ``event_id`` when the event must stay the same across retries of its cause.
        """
        env = make_envelope(
            data,
            source=self.source,
            subject=about,
            correlation_id=correlation_id,
            event_id=event_id,
            occurred_at=occurred_at,
        )
        self._keep(subject, env)
        return env

    @abstractmethod
    def _keep(self, subject: str, env: Envelope[EventData]) -> None:
        """Take one emitted event."""


class Emitter(EventSink):
    """Queues events for the outbox of one open transaction.

    Events are written in one statement by :meth:`flush`, which the owner of the transaction
    calls just before commit (the consumer runtime for handlers, :func:`emitting` otherwise), so
    a batch that emits thousands of events costs one round trip.

    Args:
        conn: the connection whose transaction the events commit with.
        source: the CloudEvents ``source`` of everything emitted here (``envelope.source_of``).
    """

    __slots__ = ("_pending", "conn")

    def __init__(self, conn: Conn, source: str) -> None:
        super().__init__(source)
        self.conn = conn
        self._pending: list[OutboxMessage] = []

    def _keep(self, subject: str, env: Envelope[EventData]) -> None:
        self._pending.append(OutboxMessage.of(subject, env))

    async def flush(self) -> int:
        """Write the queued events to the outbox; returns how many were new."""
        pending, self._pending = self._pending, []
        return await enqueue(self.conn, pending)


@asynccontextmanager
async def emitting(conn: Conn, source: str) -> AsyncIterator[Emitter]:
    """A transaction on ``conn`` whose emitted events commit with it.

    Everything done on ``conn`` inside the block, and every event emitted through the yielded
    emitter, commits together when the block ends normally, and not at all when it raises.
    Inside an open transaction it becomes a savepoint of that transaction.
    """
    async with conn.transaction():
        emitter = Emitter(conn, source)
        yield emitter
        await emitter.flush()


@asynccontextmanager
async def pooled_emitting(pool: asyncpg.Pool, source: str) -> AsyncIterator[Emitter]:
    """:func:`emitting` on a connection of ``pool`` (the emitter's ``conn``), in one transaction
    that gives the connection back without a reset round trip when it commits
    (``db.pooled_transaction``): run only transaction-scoped statements in the block."""
    async with pooled_transaction(pool) as conn:
        emitter = Emitter(conn, source)
        yield emitter
        await emitter.flush()
