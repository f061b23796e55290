"""The inbox: each consumer applies an event at most once, however often it arrives."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from lockstep_common.db import Conn


async def claim(conn: Conn, consumer: str, event_ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
    """Record ``event_ids`` as processed by ``consumer``; return those not seen before.

    Run it in the transaction that applies the events: if that transaction rolls back, the claim
    does too, and a redelivery is processed again (microservices.io "Idempotent consumer").
    """
    if not event_ids:
        return set()
    rows = await conn.fetch(
        "INSERT INTO inbox (consumer, event_id) SELECT $1, unnest($2::uuid[])"
        " ON CONFLICT DO NOTHING RETURNING event_id",
        consumer,
        list(dict.fromkeys(event_ids)),
    )
    return {r["event_id"] for r in rows}


async def purge(conn: Conn, older_than_s: float) -> int:
    """Forget ids older than the longest time a message can still be redelivered."""
    result: str = await conn.execute(
        "DELETE FROM inbox WHERE received_at < now() - make_interval(secs => $1)", older_than_s
    )
    return int(result.rsplit(" ", 1)[-1])
