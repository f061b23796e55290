"""Rollout facts the inventory keeps (``wave_nodes``, ``recorded_changes``).

Each row keeps the stream sequence of the event that wrote it (``wave.planned`` in ROLLOUTS,
``device.*`` in DEVICES): only an event later in the same stream replaces it, whatever times
the senders put on them (migrations/0005_broker_order.sql)."""

from __future__ import annotations

from collections.abc import Sequence

from lockstep_common.db import Conn


async def start_wave(
    conn: Conn, rollout_id: str, wave: int, node_ids: Sequence[str], sequence: int
) -> list[str]:
    """Mark the wave's nodes active; returns them, each once (none when the wave or its
    rollout has already ended: a late or retried wave.planned; a node a later wave.planned of
    the rollout holds stays in that wave)."""
    rows = await conn.fetch(
        "INSERT INTO wave_nodes (rollout_id, wave, node_id, stream_seq)"
        " SELECT $1, $2, unnest($3::text[]), $4 WHERE NOT EXISTS (SELECT 1 FROM ended_waves"
        " WHERE rollout_id = $1 AND wave IN ($2, -1))"
        " ON CONFLICT (rollout_id, node_id) DO UPDATE SET wave = EXCLUDED.wave,"
        " stream_seq = EXCLUDED.stream_seq, since = now()"
        " WHERE wave_nodes.stream_seq < EXCLUDED.stream_seq RETURNING node_id",
        rollout_id,
        wave,
        list(dict.fromkeys(node_ids)),  # an upsert may not touch one row twice
        sequence,
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
    sequence: int,
) -> bool:
    """Remember the version a rollout step left; steps earlier in the stream arriving late
    change nothing."""
    kept = await conn.fetchval(
        "INSERT INTO recorded_changes (node_id, component, to_version, rollout_id, stream_seq)"
        " VALUES ($1, $2, $3, $4, $5) ON CONFLICT (node_id, component) DO UPDATE SET"
        " to_version = EXCLUDED.to_version, rollout_id = EXCLUDED.rollout_id,"
        " stream_seq = EXCLUDED.stream_seq, at = now()"
        " WHERE recorded_changes.stream_seq < EXCLUDED.stream_seq RETURNING true",
        node_id,
        component,
        version,
        rollout_id,
        sequence,
    )
    return bool(kept)
