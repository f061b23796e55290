"""Staged fleet-import chunks and committed imports (migrations/0008_imports.sql)."""

from __future__ import annotations

import datetime as dt
import json
import uuid

from lockstep_common.db import Conn
from lockstep_inventory.adapters.registry import ImportResult
from lockstep_inventory.domain.fleet_file import NodeEntry

ABANDONED = dt.timedelta(days=1)
"""Chunks of an import whose last chunk never came are dropped after this long."""


async def lock(conn: Conn, import_id: uuid.UUID) -> None:
    """Serialise the chunks of one import (until the transaction ends)."""
    await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 7))", str(import_id))


async def committed(conn: Conn, import_id: uuid.UUID) -> bool:
    return bool(await conn.fetchval("SELECT true FROM imports WHERE import_id = $1", import_id))


async def chunk_counts(conn: Conn, import_id: uuid.UUID) -> dict[int, int]:
    """The import's staged chunks: number -> the chunk count each was sent with."""
    rows = await conn.fetch(
        "SELECT chunk, chunks FROM import_chunks WHERE import_id = $1", import_id
    )
    return {r["chunk"]: r["chunks"] for r in rows}


async def chunk_nodes(conn: Conn, import_id: uuid.UUID, chunk: int) -> tuple[NodeEntry, ...]:
    """One staged chunk's nodes."""
    text = await conn.fetchval(
        "SELECT nodes FROM import_chunks WHERE import_id = $1 AND chunk = $2", import_id, chunk
    )
    return tuple(NodeEntry.model_validate(n) for n in json.loads(text or "[]"))


async def held_elsewhere(
    conn: Conn, import_id: uuid.UUID, chunk: int, node_ids: list[str]
) -> dict[str, int]:
    """Which of ``node_ids`` another staged chunk of the import holds: id -> its chunk."""
    rows = await conn.fetch(
        "SELECT n->>'id' AS id, c.chunk FROM import_chunks c, jsonb_array_elements(c.nodes) n"
        " WHERE c.import_id = $1 AND c.chunk <> $2 AND n->>'id' = ANY($3::text[])",
        import_id,
        chunk,
        node_ids,
    )
    return {r["id"]: r["chunk"] for r in rows}


async def every_node(conn: Conn, import_id: uuid.UUID) -> list[NodeEntry]:
    """Every staged node of the import, in chunk order."""
    rows = await conn.fetch(
        "SELECT nodes FROM import_chunks WHERE import_id = $1 ORDER BY chunk", import_id
    )
    return [NodeEntry.model_validate(n) for r in rows for n in json.loads(r["nodes"])]


async def stage(
    conn: Conn, import_id: uuid.UUID, chunk: int, chunks: int, nodes: tuple[NodeEntry, ...]
) -> None:
    await conn.execute(
        "INSERT INTO import_chunks (import_id, chunk, chunks, nodes) VALUES ($1, $2, $3, $4)",
        import_id,
        chunk,
        chunks,
        json.dumps([n.model_dump() for n in nodes]),
    )


async def drop_abandoned(conn: Conn, now: dt.datetime) -> None:
    await conn.execute("DELETE FROM import_chunks WHERE staged_at < $1", now - ABANDONED)


async def record(
    conn: Conn, import_id: uuid.UUID, identity: str, chunks: int, result: ImportResult
) -> None:
    """The import committed: its chunks go, its record stays."""
    await conn.execute("DELETE FROM import_chunks WHERE import_id = $1", import_id)
    await conn.execute(
        "INSERT INTO imports (import_id, identity, chunks, nodes, added, updated, unchanged)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7)",
        import_id,
        identity,
        chunks,
        result.added + result.updated + result.unchanged,
        result.added,
        result.updated,
        result.unchanged,
    )
