"""Writing events to the transactional outbox.

Call these inside the transaction that changes state: the events commit, or vanish, with it.
The relay (``relay.py``) publishes them afterwards.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lockstep_common.db import Conn
from lockstep_common.envelope import Envelope


@dataclass(frozen=True, slots=True)
class OutboxMessage:
    """One row to publish: a logical subject, a body and the id JetStream dedups on."""

    event_id: uuid.UUID
    subject: str
    payload: bytes
    headers: dict[str, str] | None = None

    @classmethod
    def of(cls, subject: str, envelope: Envelope[Any]) -> OutboxMessage:
        """An event in its CloudEvents JSON form."""
        return cls(envelope.event_id, subject, envelope.to_json())


async def enqueue(conn: Conn, messages: Sequence[OutboxMessage]) -> int:
    """Insert messages in the caller's transaction; returns how many were new.

    A message whose ``event_id`` is already in the outbox is skipped, so a handler that runs
    twice (say, after a crash before its commit was acknowledged) cannot emit twice.
    """
    if not messages:
        return 0
    if not conn.is_in_transaction():
        raise RuntimeError("outbox.enqueue must run inside the transaction of the state change")
    result: str = await conn.execute(
        "INSERT INTO outbox (event_id, subject, payload, headers)"
        " SELECT * FROM unnest($1::uuid[], $2::text[], $3::bytea[], $4::jsonb[])"
        " ON CONFLICT (event_id) DO NOTHING",
        [m.event_id for m in messages],
        [m.subject for m in messages],
        [m.payload for m in messages],
        [json.dumps(m.headers) if m.headers else None for m in messages],
    )
    return int(result.rsplit(" ", 1)[-1])
