"""Dead letters: a row with the reason in the service's table, and a copy on ``dlq.<subject>``.

Both are written in one transaction (the copy goes through the outbox), before the message is
terminated, so a crash in between leaves a message that is redelivered and dead-lettered again
idempotently (the row is unique per stream sequence and consumer, and only a new row queues a
copy).

The copy's id is random, not derived from the stream sequence: a derived id is predictable, and a
message published ahead of time with that ``Nats-Msg-Id`` would make JetStream drop the real copy
as a duplicate. Its body is capped (the row keeps the whole payload): an original near the size
limit plus the headers would exceed the DLQ stream's limit and never publish.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass

from lockstep_common import subjects
from lockstep_common.db import Conn
from lockstep_common.outbox import OutboxMessage, enqueue

COPY_BODY_LIMIT = 64 * 1024  # bytes of the original carried by the dlq. copy

# Header names follow the common DLQ convention (x-dead-letter-reason, x-delivery-count, ...).
REASON_HEADER = "Lockstep-Dlq-Reason"
KIND_HEADER = "Lockstep-Dlq-Error-Kind"
DELIVERIES_HEADER = "Lockstep-Dlq-Deliveries"
CONSUMER_HEADER = "Lockstep-Dlq-Consumer"
STREAM_HEADER = "Lockstep-Dlq-Stream"
SEQUENCE_HEADER = "Lockstep-Dlq-Stream-Seq"
TRUNCATED_HEADER = "Lockstep-Dlq-Truncated-From"  # the original's size, when the body is cut
DIGEST_HEADER = "Lockstep-Dlq-Payload-Sha256"  # of the whole original, to match the row


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """Everything recorded about a message that could not be processed."""

    consumer: str
    stream: str
    stream_seq: int
    subject: str
    payload: bytes | None
    reason: str
    error_kind: str
    deliveries: int
    detected_by: str  # "consumer" or "advisory"


async def record(conn: Conn, letter: DeadLetter) -> bool:
    """Store the dead letter and queue its ``dlq.`` copy; False if it was already recorded."""
    async with conn.transaction():
        inserted = await conn.fetchval(
            "INSERT INTO dead_letters (consumer, stream, stream_seq, subject, payload, reason,"
            " error_kind, deliveries, detected_by) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9)"
            " ON CONFLICT (stream, stream_seq, consumer) DO NOTHING RETURNING id",
            letter.consumer,
            letter.stream,
            letter.stream_seq,
            letter.subject,
            letter.payload,
            letter.reason[:4000],
            letter.error_kind,
            letter.deliveries,
            letter.detected_by,
        )
        if inserted is None:
            return False
        if not letter.subject.startswith("dlq."):
            await enqueue(conn, [copy_of(letter)])
    return True


async def purge(conn: Conn, older_than_s: float) -> int:
    """Delete dead letters recorded longer ago than the retention; returns how many."""
    result: str = await conn.execute(
        "DELETE FROM dead_letters WHERE failed_at < now() - make_interval(secs => $1)",
        older_than_s,
    )
    return int(result.rsplit(" ", 1)[-1])


def copy_of(letter: DeadLetter) -> OutboxMessage:
    """The ``dlq.<subject>`` copy of a dead letter: a random id and a capped body."""
    payload = letter.payload or b""
    headers = {
        REASON_HEADER: _header_safe(letter.reason),
        KIND_HEADER: letter.error_kind,
        DELIVERIES_HEADER: str(letter.deliveries),
        CONSUMER_HEADER: letter.consumer,
        STREAM_HEADER: letter.stream,
        SEQUENCE_HEADER: str(letter.stream_seq),
        DIGEST_HEADER: hashlib.sha256(payload).hexdigest(),
    }
    if len(payload) > COPY_BODY_LIMIT:
        headers[TRUNCATED_HEADER] = str(len(payload))
    return OutboxMessage(
        event_id=uuid.uuid4(),
        subject=subjects.dead_letter(letter.subject),
        payload=payload[:COPY_BODY_LIMIT],
        headers=headers,
    )


def _header_safe(text: str) -> str:
    """NATS headers are single-line: fold line breaks and cap the length."""
    return " ".join(text.split())[:1000]
