"""The inventory's state tables (migrations/0002_state.sql): reads and batched writes.

Writes are one statement per batch (``unnest`` upserts) or ``COPY`` (history), never one
round trip per node: a 12,500-node sweep or a 256-report pull commits in a handful of
statements. Callers lock the nodes they evaluate with :func:`lock_nodes` first, in id order,
so the sweeper and the telemetry consumer never interleave on one node (no lost update, no
duplicate drift event) and never deadlock.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import asyncpg

from lockstep_common.db import Conn
from lockstep_common.events.v1 import DriftItem, ScopeSelector
from lockstep_common.vocabulary import Component, ObservationSource
from lockstep_inventory.adapters import registry
from lockstep_inventory.domain.evaluate import RolloutFacts
from lockstep_inventory.domain.fleet_file import NodeEntry
from lockstep_inventory.domain.ingestion import DriftRow, Head, HistoryRow, Key, Observations
from lockstep_inventory.domain.observation import Observation, content_digest
from lockstep_inventory.domain.pins import Pin

_NODE_FIELDS = ", ".join(registry.FIELDS)


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


async def lock_nodes_judged(
    conn: Conn, node_ids: Iterable[str]
) -> tuple[dict[str, NodeEntry], dict[str, dt.datetime]]:
    """Like :func:`lock_nodes`, plus when each was last judged (one round trip; nodes never
    judged are left out)."""
    rows = await conn.fetch(
        f"SELECT {', '.join('n.' + f for f in registry.FIELDS)},"
        " d.evaluated_at AS judged FROM nodes n LEFT JOIN drift d ON d.node_id = n.id"
        " WHERE n.id = ANY($1::text[]) ORDER BY n.id FOR NO KEY UPDATE OF n",
        sorted(set(node_ids)),
    )
    found: dict[str, NodeEntry] = {}
    judged: dict[str, dt.datetime] = {}
    for r in rows:
        fields = dict(r)
        if (at := fields.pop("judged")) is not None:
            judged[r["id"]] = at
        found[r["id"]] = NodeEntry.model_validate(fields)
    return found, judged


async def heads(conn: Conn, node_ids: Iterable[str]) -> dict[Key, Head]:
    """(node, source) -> the stored report's sequence, time, readability and digest."""
    rows = await conn.fetch(
        "SELECT node_id, source, sequence, observed_at, readable, digest FROM observations"
        " WHERE node_id = ANY($1::text[])",
        list(set(node_ids)),
    )
    return {
        (r["node_id"], ObservationSource(r["source"])): Head(
            ObservationSource(r["source"]),
            r["sequence"],
            r["observed_at"],
            r["readable"],
            r["digest"],
        )
        for r in rows
    }


async def lock_nodes(conn: Conn, node_ids: Iterable[str]) -> dict[str, NodeEntry]:
    """The registered nodes among ``node_ids``, row-locked until the transaction ends."""
    rows = await conn.fetch(
        f"SELECT {_NODE_FIELDS} FROM nodes WHERE id = ANY($1::text[]) ORDER BY id"
        " FOR NO KEY UPDATE",
        sorted(set(node_ids)),
    )
    return {r["id"]: NodeEntry.model_validate(dict(r)) for r in rows}


async def nodes(conn: Conn, node_ids: Iterable[str] | None = None) -> dict[str, NodeEntry]:
    """Registered nodes (all, or those among ``node_ids``), without locking."""
    if node_ids is None:
        rows = await conn.fetch(f"SELECT {_NODE_FIELDS} FROM nodes ORDER BY id")
    else:
        rows = await conn.fetch(
            f"SELECT {_NODE_FIELDS} FROM nodes WHERE id = ANY($1::text[]) ORDER BY id",
            list(set(node_ids)),
        )
    return {r["id"]: NodeEntry.model_validate(dict(r)) for r in rows}


async def fleet_page(
    conn: Conn, scope: ScopeSelector | None, after: str | None, limit: int
) -> list[NodeEntry]:
    """Up to ``limit`` registered nodes in ``scope`` whose id sorts after ``after``, by id (the
    same selection as ``Pin.covers``: an empty list of a key means any)."""
    s = scope or ScopeSelector()
    rows = await conn.fetch(
        f"SELECT {_NODE_FIELDS} FROM nodes WHERE ($1::text IS NULL OR id > $1)"
        " AND (cardinality($2::text[]) = 0 OR site = ANY($2::text[]))"
        " AND (cardinality($3::text[]) = 0 OR pool = ANY($3::text[]))"
        " AND (cardinality($4::text[]) = 0 OR profile = ANY($4::text[]))"
        " AND (cardinality($5::text[]) = 0 OR fabric_domain = ANY($5::text[]))"
        " AND (cardinality($6::text[]) = 0 OR id = ANY($6::text[]))"
        " ORDER BY id LIMIT $7",
        after,
        list(s.sites),
        list(s.pools),
        list(s.profiles),
        list(s.fabric_domains),
        list(s.nodes),
        limit,
    )
    return [NodeEntry.model_validate(dict(r)) for r in rows]


async def versions(conn: Conn, node_ids: list[str]) -> dict[str, int]:
    """Each registered node's registry version (``registry``: greater after any change)."""
    rows = await conn.fetch("SELECT id, version FROM nodes WHERE id = ANY($1)", node_ids)
    return {r["id"]: r["version"] for r in rows}


def _observation(r: asyncpg.Record) -> Observation:
    return Observation(
        source=ObservationSource(r["source"]),
        sequence=r["sequence"],
        observed_at=r["observed_at"],
        readable=r["readable"],
        error=r["error"],
        unreadable_since=r["unreadable_since"],
        components={Component(k): v for k, v in json.loads(r["components"]).items()},
        conflicts={Component(k): v for k, v in json.loads(r["conflicts"]).items()},
        members=json.loads(r["members"]),
        firmware_dirs=tuple(r["firmware_dirs"]) if r["firmware_dirs"] is not None else None,
        loaded_module=r["loaded_module"],
    )


async def nodes_in_site(conn: Conn, site: str) -> list[str]:
    """Ids of the registered nodes of a site."""
    rows = await conn.fetch("SELECT id FROM nodes WHERE site = $1 ORDER BY id", site)
    return [r["id"] for r in rows]


async def observations(conn: Conn, node_ids: Iterable[str]) -> Observations:
    """The latest applied report per source of each node."""
    rows = await conn.fetch(
        "SELECT node_id, source, sequence, observed_at, readable, error, unreadable_since,"
        " components::text, conflicts::text, members::text, firmware_dirs, loaded_module"
        " FROM observations WHERE node_id = ANY($1::text[])",
        list(set(node_ids)),
    )
    out: Observations = {}
    for r in rows:
        out.setdefault(r["node_id"], {})[ObservationSource(r["source"])] = _observation(r)
    return out


async def save_observations(conn: Conn, rows: Sequence[tuple[str, Observation]]) -> None:
    """Upsert each (node, source)'s latest report in one statement."""
    if not rows:
        return
    cols: list[list[Any]] = [[] for _ in range(13)]
    for node_id, o in rows:
        values = (
            node_id,
            str(o.source),
            o.sequence,
            o.observed_at,
            o.readable,
            o.error,
            o.unreadable_since,
            _dumps({str(k): v for k, v in o.components.items()}),
            _dumps({str(k): dict(v) for k, v in o.conflicts.items()}),
            _dumps(dict(o.members)),
            _dumps(list(o.firmware_dirs)) if o.firmware_dirs is not None else None,
            o.loaded_module,
            content_digest(o),
        )
        for col, value in zip(cols, values, strict=True):
            col.append(value)
    await conn.execute(
        "INSERT INTO observations (node_id, source, sequence, observed_at, readable, error,"
        " unreadable_since, components, conflicts, members, firmware_dirs, loaded_module,"
        " digest) SELECT n, s, q, t, r, e, u, c::jsonb, x::jsonb, m::jsonb,"
        " CASE WHEN f IS NOT NULL THEN ARRAY(SELECT jsonb_array_elements_text(f::jsonb)) END,"
        " l, d FROM unnest($1::text[], $2::text[], $3::bigint[], $4::timestamptz[], $5::bool[],"
        " $6::text[], $7::timestamptz[], $8::text[], $9::text[], $10::text[], $11::text[],"
        " $12::text[], $13::text[]) AS v(n, s, q, t, r, e, u, c, x, m, f, l, d)"
        " ON CONFLICT (node_id, source) DO UPDATE SET sequence = EXCLUDED.sequence,"
        " observed_at = EXCLUDED.observed_at, received_at = now(), readable = EXCLUDED.readable,"
        " error = EXCLUDED.error, unreadable_since = EXCLUDED.unreadable_since,"
        " components = EXCLUDED.components, conflicts = EXCLUDED.conflicts,"
        " members = EXCLUDED.members, firmware_dirs = EXCLUDED.firmware_dirs,"
        " loaded_module = EXCLUDED.loaded_module, digest = EXCLUDED.digest",
        *cols,
    )


async def touch_observations(conn: Conn, rows: Sequence[tuple[str, Observation]]) -> None:
    """Update stored reports whose versions are unchanged: sequence, times and readability only.

    The steady state of a fleet (most reports repeat the last one); leaving the jsonb columns
    alone saves encoding and parsing them. The rows must exist (callers read them first under
    the node lock).
    """
    if not rows:
        return
    await conn.execute(
        "UPDATE observations o SET sequence = v.q, observed_at = v.t, received_at = now(),"
        " readable = v.r, error = v.e, unreadable_since = v.u"
        " FROM unnest($1::text[], $2::text[], $3::bigint[], $4::timestamptz[], $5::bool[],"
        " $6::text[], $7::timestamptz[]) AS v(n, s, q, t, r, e, u)"
        " WHERE o.node_id = v.n AND o.source = v.s",
        [n for n, _ in rows],
        [str(o.source) for _, o in rows],
        [o.sequence for _, o in rows],
        [o.observed_at for _, o in rows],
        [o.readable for _, o in rows],
        [o.error for _, o in rows],
        [o.unreadable_since for _, o in rows],
    )


async def append_history(conn: Conn, rows: Sequence[HistoryRow]) -> None:
    """Append version changes with COPY: (node, source, item, old, new, observed_at)."""
    if rows:
        await conn.copy_records_to_table(
            "history",
            records=rows,
            columns=("node_id", "source", "item", "old_version", "new_version", "observed_at"),
        )


def parse_items(text: str) -> tuple[DriftItem, ...]:
    """Drift items stored as JSON (lax mode: enums and nulls come back as JSON values)."""
    return tuple(DriftItem.model_validate(i, strict=False) for i in json.loads(text))


async def drift(conn: Conn, node_ids: Iterable[str] | None = None) -> dict[str, DriftRow]:
    """Stored drift sets (all nodes, or those among ``node_ids``)."""
    sql = "SELECT node_id, stack_hash, items::text, since, evaluated_at FROM drift"
    rows = await (
        conn.fetch(sql)
        if node_ids is None
        else conn.fetch(sql + " WHERE node_id = ANY($1::text[])", list(set(node_ids)))
    )
    return {
        r["node_id"]: DriftRow(
            r["stack_hash"], parse_items(r["items"]), r["since"], r["evaluated_at"]
        )
        for r in rows
    }


async def save_drift(conn: Conn, rows: Mapping[str, DriftRow]) -> None:
    """Upsert drift sets in one statement."""
    if not rows:
        return
    ids = list(rows)
    await conn.execute(
        "INSERT INTO drift (node_id, stack_hash, items, kinds, since, evaluated_at)"
        " SELECT n, h, i::jsonb, ARRAY(SELECT DISTINCT jsonb_array_elements(i::jsonb)->>'kind'"
        " ORDER BY 1), s, e"
        " FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[], $5::timestamptz[])"
        " AS v(n, h, i, s, e)"
        " ON CONFLICT (node_id) DO UPDATE SET stack_hash = EXCLUDED.stack_hash,"
        " items = EXCLUDED.items, kinds = EXCLUDED.kinds, since = EXCLUDED.since,"
        " evaluated_at = EXCLUDED.evaluated_at",
        ids,
        [rows[n].stack_hash for n in ids],
        [_dumps([i.model_dump(mode="json") for i in rows[n].items]) for n in ids],
        [rows[n].since for n in ids],
        [rows[n].evaluated_at for n in ids],
    )


async def pins(conn: Conn) -> list[Pin]:
    """Every current pin (the newest per site and scope)."""
    rows = await conn.fetch(
        "SELECT site, scope::text, stack_hash, stack::text, rollout_id, stream_seq, occurred_at"
        " FROM pins"
    )
    return [
        Pin(
            site=r["site"],
            scope=ScopeSelector.model_validate_json(r["scope"]),
            stack_hash=r["stack_hash"],
            stack=_stack(r["stack"]),
            sequence=r["stream_seq"],
            occurred_at=r["occurred_at"],
            rollout_id=r["rollout_id"],
        )
        for r in rows
    ]


def _stack(text: str) -> dict[str, dict[Component, str]]:
    return {p: {Component(c): v for c, v in s.items()} for p, s in json.loads(text).items()}


async def save_pin(conn: Conn, pin: Pin, scope_key: str, event_id: Any) -> bool:
    """Keep ``pin`` unless one later in the stream holds its (site, scope); True when it
    was kept."""
    stack = _dumps({p: {str(c): v for c, v in s.items()} for p, s in pin.stack.items()})
    await conn.execute(
        "INSERT INTO stacks (stack_hash, stack) VALUES ($1, $2::jsonb) ON CONFLICT DO NOTHING",
        pin.stack_hash,
        stack,
    )
    kept = await conn.fetchval(
        "INSERT INTO pins (site, scope_key, scope, stack_hash, stack, rollout_id, event_id,"
        " stream_seq, occurred_at) VALUES ($1, $2, $3::jsonb, $4, $5::jsonb, $6, $7, $8, $9)"
        " ON CONFLICT (site, scope_key) DO UPDATE SET scope = EXCLUDED.scope,"
        " stack_hash = EXCLUDED.stack_hash, stack = EXCLUDED.stack,"
        " rollout_id = EXCLUDED.rollout_id, event_id = EXCLUDED.event_id,"
        " stream_seq = EXCLUDED.stream_seq, occurred_at = EXCLUDED.occurred_at,"
        " received_at = now() WHERE pins.stream_seq < EXCLUDED.stream_seq RETURNING true",
        pin.site,
        scope_key,
        pin.scope.model_dump_json(),
        pin.stack_hash,
        stack,
        pin.rollout_id,
        event_id,
        pin.sequence,
        pin.occurred_at,
    )
    return bool(kept)


async def stack(conn: Conn, stack_hash: str) -> dict[str, dict[Component, str]] | None:
    """A stack some pin carried, by hash."""
    text = await conn.fetchval("SELECT stack::text FROM stacks WHERE stack_hash = $1", stack_hash)
    return _stack(text) if text is not None else None


async def rollout_facts(conn: Conn, node_ids: Iterable[str]) -> dict[str, RolloutFacts]:
    """Active wave and recorded rollout steps per node (nodes without any are left out)."""
    ids = list(set(node_ids))
    waves = await conn.fetch(
        "SELECT DISTINCT ON (node_id) node_id, rollout_id FROM wave_nodes"
        " WHERE node_id = ANY($1::text[]) ORDER BY node_id, stream_seq DESC",
        ids,
    )
    steps = await conn.fetch(
        "SELECT node_id, component, to_version FROM recorded_changes"
        " WHERE node_id = ANY($1::text[])",
        ids,
    )
    active = {r["node_id"]: r["rollout_id"] for r in waves}
    recorded: dict[str, dict[Component, str]] = {}
    for r in steps:
        recorded.setdefault(r["node_id"], {})[Component(r["component"])] = r["to_version"]
    return {
        n: RolloutFacts(active.get(n), recorded.get(n, {})) for n in set(active) | set(recorded)
    }
