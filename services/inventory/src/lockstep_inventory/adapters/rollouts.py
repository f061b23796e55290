"""Rollout facts the inventory keeps (``wave_nodes``, ``recorded_changes``)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from lockstep_common.db import Conn


async def start_wave(
    conn: Conn, rollout_id: str, wave: int, node_ids: Sequence[str], at: dt.datetime
) -> list[str]:
    """Mark the wave's nodes active; returns them, each once (none when the wave or its
    rollout has already ended: a late or retried wave.planned)."""
    rows = await conn.fetch(
        "INSERT INTO wave_nodes (rollout_id, wave, node_id, since)"
        " SELECT $1, $2, unnest($3::text[]), $4 WHERE NOT EXISTS (SELECT 1 FROM ended_waves"
        " WHERE rollout_id = $1 AND wave IN ($2, -1))"
        " ON CONFLICT (rollout_id, node_id) DO UPDATE SET wave = EXCLUDED.wave,"
        " since = EXCLUDED.since RETURNING node_id",
        rollout_id,
        wave,
        list(dict.fromkeys(node_ids)),  # an upsert may not touch one row twice
        at,
    )
    return sorted(r["node_id"] for r in rows)


async def end_wave(conn: Conn, rollout_id: str, wave: int) -> list[str]:
    """The wave's nodes leave it (for good); returns them."""
    await _ended(conn, rollout_id, wave)
    rows = await conn.fetch(
        "DELETE FROM wave_nodes WHERE rollout_id = $1 AND wave = $2 RETURNING node_id",
        rollout_id,
        wave,
    )
    return [r["node_id"] for r in rows]


async def end_rollout(conn: Conn, rollout_id: str) -> list[str]:
    """Every node of the rollout leaves its wave (for good); returns them."""
    await _ended(conn, rollout_id, -1)
    rows = await conn.fetch(
        "DELETE FROM wave_nodes WHERE rollout_id = $1 RETURNING node_id", rollout_id
    )
    return [r["node_id"] for r in rows]


async def _ended(conn: Conn, rollout_id: str, wave: int) -> None:
    await conn.execute(
        "INSERT INTO ended_waves (rollout_id, wave) VALUES ($1, $2) ON CONFLICT DO NOTHING",
        rollout_id,
        wave,
    )


async def record_change(
    conn: Conn,
    node_id: str,
    component: str,
    version: str,
    rollout_id: str,
    at: dt.datetime,
) -> bool:
    """Remember the version a rollout step left; older steps arriving late change nothing."""
    kept = await conn.fetchval(
        "INSERT INTO recorded_changes (node_id, component, to_version, rollout_id, at)"
        " VALUES ($1, $2, $3, $4, $5) ON CONFLICT (node_id, component) DO UPDATE SET"
        " to_version = EXCLUDED.to_version, rollout_id = EXCLUDED.rollout_id, at = EXCLUDED.at"
        " WHERE recorded_changes.at <= EXCLUDED.at RETURNING true",
        node_id,
        component,
        version,
        rollout_id,
        at,
    )
    return bool(kept)
