"""Read models of the inventory: fleet status, one node in full, the drift report.

Used by ``lockstep fleet status|show|drift`` and by the service's Prometheus gauges, so the
numbers an operator reads and the numbers an alert fires on are the same query.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from lockstep_common.compatibility.table import CompatibilityRules
from lockstep_common.db import Conn
from lockstep_common.events.v1 import DriftItem
from lockstep_common.vocabulary import Component, DriftKind, ObservationSource
from lockstep_inventory.adapters import state, sweeps
from lockstep_inventory.domain.fleet_file import NodeEntry
from lockstep_inventory.domain.golden import NotGolden, stack_of_node
from lockstep_inventory.domain.ingestion import DriftRow
from lockstep_inventory.domain.observation import Observation
from lockstep_inventory.domain.pins import pin_of

# Items that do not stop a node from conforming: observed components nobody pinned.
INFORMATIONAL: frozenset[DriftKind] = frozenset({DriftKind.UNKNOWN})


@dataclass(slots=True)
class Group:
    """Conformance of one (pool, profile) group."""

    nodes: int = 0
    conforming: int = 0
    drifted: int = 0
    unreadable: int = 0
    unobserved: int = 0

    @property
    def ratio(self) -> float:
        return self.conforming / self.nodes if self.nodes else 1.0


@dataclass(slots=True)
class FleetStatus:
    """The fleet at a glance."""

    total: Group = field(default_factory=Group)
    groups: dict[tuple[str, str], Group] = field(default_factory=dict)  # (pool, profile)
    drifted_by_kind: Counter[str] = field(default_factory=Counter)
    sweep: sweeps.SweepRow | None = None
    sweep_running: bool = False  # the newest sweep is unfinished and a sweeper holds the lock
    last_sweep: sweeps.SweepRow | None = None

    def as_json(self) -> dict[str, Any]:
        def group(g: Group) -> dict[str, Any]:
            return {
                "nodes": g.nodes,
                "conforming": g.conforming,
                "drifted": g.drifted,
                "unreadable": g.unreadable,
                "unobserved": g.unobserved,
                "conformance_ratio": round(g.ratio, 6),
            }

        def sweep(s: sweeps.SweepRow | None) -> dict[str, Any] | None:
            if s is None:
                return None
            end = s.finished_at
            return {
                "id": s.id,
                "started_at": s.started_at.isoformat(),
                "finished_at": end.isoformat() if end else None,
                "seconds": (end - s.started_at).total_seconds() if end else None,
                "total": s.total,
                "done": s.done,
                "unreadable": s.unreadable,
                "error": s.error,
            }

        return {
            "fleet": group(self.total),
            "groups": [
                {"pool": pool, "profile": profile, **group(g)}
                for (pool, profile), g in sorted(self.groups.items())
            ],
            "drifted_by_kind": dict(sorted(self.drifted_by_kind.items())),
            "sweep": sweep(self.sweep),
            "sweep_running": self.sweep_running,
            "last_finished_sweep": sweep(self.last_sweep),
        }


async def fleet_status(conn: Conn) -> FleetStatus:
    """Conformance by pool and profile, drifted nodes by kind, the newest sweeps."""
    rows = await conn.fetch(
        "SELECT n.pool, n.profile, d.kinds, o.readable FROM nodes n"
        " LEFT JOIN drift d ON d.node_id = n.id"
        " LEFT JOIN observations o ON o.node_id = n.id AND o.source = 'redfish'"
    )
    status = FleetStatus()
    for r in rows:
        group = status.groups.setdefault((r["pool"], r["profile"]), Group())
        kinds = set(r["kinds"] or ())
        for g in (group, status.total):
            g.nodes += 1
            if r["kinds"] is None:
                g.unobserved += 1
            elif kinds - INFORMATIONAL:
                g.drifted += 1
            elif r["readable"] is not False:
                g.conforming += 1
            if r["readable"] is False:
                g.unreadable += 1
        if r["kinds"] is not None:
            status.drifted_by_kind.update(kinds - INFORMATIONAL)
    status.sweep = await sweeps.latest(conn)
    if status.sweep is not None and status.sweep.finished_at is None:
        status.sweep_running = await sweeps.lock_held(conn)
    status.last_sweep = await sweeps.last_finished(conn)
    return status


@dataclass(frozen=True, slots=True)
class NodeDetail:
    """Everything the inventory knows about one node."""

    node: NodeEntry
    observations: dict[ObservationSource, Observation]
    drift: DriftRow | None
    pin_stack_hash: str | None
    history: list[dict[str, Any]]


async def node_detail(conn: Conn, node_id: str, history: int = 50) -> NodeDetail | None:
    """One node: registry entry, latest report per source, drift set, pin, recent changes."""
    found = await state.nodes(conn, [node_id])
    if node_id not in found:
        return None
    node = found[node_id]
    pin = pin_of(node, await state.pins(conn))
    rows = await conn.fetch(
        "SELECT source, item, old_version, new_version, observed_at FROM history"
        " WHERE node_id = $1 ORDER BY observed_at DESC, item LIMIT $2",
        node_id,
        history,
    )
    return NodeDetail(
        node=node,
        observations=(await state.observations(conn, [node_id])).get(node_id, {}),
        drift=(await state.drift(conn, [node_id])).get(node_id),
        pin_stack_hash=pin.stack_hash if pin else None,
        history=[
            {
                "source": r["source"],
                "item": r["item"],
                "old": r["old_version"],
                "new": r["new_version"],
                "observed_at": r["observed_at"].isoformat(),
            }
            for r in rows
        ],
    )


@dataclass(frozen=True, slots=True)
class DriftEntry:
    """One drifted node in the report."""

    node_id: str
    site: str
    pool: str
    profile: str
    stack_hash: str | None
    since: dt.datetime
    items: tuple[DriftItem, ...]


async def drift_report(
    conn: Conn,
    *,
    include_informational: bool = False,
    after: str | None = None,
    limit: int | None = None,
) -> list[DriftEntry]:
    """Every node whose drift set is not empty (only ``unknown`` items: left out by default),
    by node id; ``after`` and ``limit`` for a page of it."""
    rows = await conn.fetch(
        "SELECT d.node_id, n.site, n.pool, n.profile, d.stack_hash, d.since, d.items::text"
        " FROM drift d JOIN nodes n ON n.id = d.node_id"
        " WHERE cardinality(d.kinds) > 0 AND ($1 OR NOT d.kinds <@ $2::text[])"
        " AND ($3::text IS NULL OR d.node_id > $3) ORDER BY d.node_id LIMIT $4",
        include_informational,
        sorted(INFORMATIONAL),
        after,
        limit,
    )
    return [
        DriftEntry(
            r["node_id"],
            r["site"],
            r["pool"],
            r["profile"],
            r["stack_hash"],
            r["since"],
            state.parse_items(r["items"]),
        )
        for r in rows
    ]


async def golden_stack(
    conn: Conn, node_id: str, *, rules: CompatibilityRules, today: dt.date
) -> dict[str, dict[Component, str]]:
    """``{profile: stack}`` of a known-good node (``golden.stack_of_node``); ``NotGolden`` names
    why the node cannot serve, an unregistered node included."""
    found = await state.nodes(conn, [node_id])
    if node_id not in found:
        raise NotGolden(f"node {node_id} is not registered")
    node = found[node_id]
    observations = (await state.observations(conn, [node_id])).get(node_id, {})
    stack = stack_of_node(node_id, node.profile, observations, rules=rules, today=today)
    return {node.profile: stack}
