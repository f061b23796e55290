"""The operator commands every service answers about its own dead letters (``lockstep dlq``):
``dlq.list``, ``dlq.show`` and ``dlq.purge`` over ``lockstep_common.operator``, so the CLI reads
no service's ``dead_letters`` table. ``ServiceApp`` serves them for every service.

``lockstep dlq replay`` needs no command of its own: the administrator reads the letter
(``dlq.show``), publishes the original with its own rights, and purges the letter.
"""

from __future__ import annotations

import base64
from typing import Any

from lockstep_common.db import Conn
from lockstep_common.events.v1 import (
    DeadLetterEntry,
    DlqListAnswered,
    DlqListRequested,
    DlqPurgeAnswered,
    DlqPurgeRequested,
    DlqShowAnswered,
    DlqShowRequested,
)
from lockstep_common.operator import Asker, Command, Refusal

COLUMNS = "id, failed_at, consumer, stream, stream_seq, subject, error_kind, deliveries, reason"


def _entry(row: Any) -> DeadLetterEntry:
    return DeadLetterEntry(**{k: row[k] for k in DeadLetterEntry.model_fields})


async def dlq_list(conn: Conn, request: DlqListRequested, asker: Asker) -> DlqListAnswered:
    """The newest dead letters."""
    del asker
    rows = await conn.fetch(
        f"SELECT {COLUMNS} FROM dead_letters ORDER BY id DESC LIMIT $1", request.limit
    )
    return DlqListAnswered(letters=tuple(_entry(r) for r in rows))


async def dlq_show(conn: Conn, request: DlqShowRequested, asker: Asker) -> DlqShowAnswered:
    """One dead letter and its original (text, or base64 when it is not UTF-8)."""
    row = await conn.fetchrow(
        f"SELECT {COLUMNS}, payload FROM dead_letters WHERE id = $1", request.id
    )
    if row is None:
        raise Refusal("not_found", f"{asker.service} has no dead letter {request.id}")
    payload = None if row["payload"] is None else bytes(row["payload"])
    try:
        text = None if payload is None else payload.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    encoded = None
    if payload is not None and text is None:
        encoded = base64.b64encode(payload).decode()
    return DlqShowAnswered(letter=_entry(row), payload=text, payload_base64=encoded)


async def dlq_purge(conn: Conn, request: DlqPurgeRequested, asker: Asker) -> DlqPurgeAnswered:
    """Forget dead letters by id or by age."""
    del asker
    if request.ids:
        rows = await conn.fetch(
            "DELETE FROM dead_letters WHERE id = ANY($1) RETURNING id", list(request.ids)
        )
    else:
        rows = await conn.fetch(
            "DELETE FROM dead_letters WHERE failed_at < now() - make_interval(secs => $1)"
            " RETURNING id",
            request.older_than_s,
        )
    return DlqPurgeAnswered(purged=tuple(sorted(r["id"] for r in rows)))


DLQ_COMMANDS: tuple[Command[Any], ...] = (
    Command("dlq.list", DlqListRequested, DlqListAnswered, dlq_list),
    Command("dlq.show", DlqShowRequested, DlqShowAnswered, dlq_show),
    Command("dlq.purge", DlqPurgeRequested, DlqPurgeAnswered, dlq_purge, writes=True),
)
