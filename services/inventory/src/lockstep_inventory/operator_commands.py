"""The inventory's operator commands (``lockstep fleet list|status|show|drift|remove``), answered
over the bus by ``lockstep_common.operator.OperatorResponder`` (``app.py`` adds them to the
service): the CLI holds no DSN.

Each command is a thin shell over the read models in ``queries.py`` (the same numbers the
service's gauges report) turned into the catalogue's typed answers; lists come a page at a time
in node id order. ``fleet.remove`` is the one write: all or none, refused (``not_found``,
nothing removed) when an id is not registered.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from typing import Any, Protocol

from lockstep_common.compatibility.table import CompatibilityRules
from lockstep_common.db import Conn
from lockstep_common.events.v1 import (
    Conformance,
    DriftedNode,
    DriftState,
    FleetDriftAnswered,
    FleetDriftRequested,
    FleetGoldenAnswered,
    FleetGoldenRequested,
    FleetListAnswered,
    FleetListRequested,
    FleetRemoveAnswered,
    FleetRemoveRequested,
    FleetShowAnswered,
    FleetShowRequested,
    FleetStatusAnswered,
    FleetStatusRequested,
    FleetSweepAnswered,
    FleetSweepRequested,
    FleetSweptAnswered,
    FleetSweptRequested,
    HistoryEntry,
    NodeObservation,
    PoolConformance,
    RegisteredNode,
    SweepState,
    SweptNode,
)
from lockstep_common.operator import Asker, Command, Refusal
from lockstep_common.vocabulary import Component, DriftKind, ObservationSource
from lockstep_inventory import queries
from lockstep_inventory.adapters import registry, state, sweeps
from lockstep_inventory.adapters.announce import Announce, unannounced
from lockstep_inventory.domain.fleet_file import NodeEntry
from lockstep_inventory.domain.golden import NotGolden
from lockstep_inventory.domain.observation import Observation
from lockstep_inventory.domain.pins import stack_of
from lockstep_inventory.sweeping import UNAVAILABLE, SweepBusyError, SweepSummary


def registered(node: NodeEntry) -> RegisteredNode:
    return RegisteredNode.model_validate(node.model_dump())


async def fleet_list(conn: Conn, request: FleetListRequested, asker: Asker) -> FleetListAnswered:
    """One page of the registry."""
    del asker
    page = await state.fleet_page(conn, None, request.after, request.limit + 1)
    nodes = page[: request.limit]
    return FleetListAnswered(
        nodes=tuple(registered(n) for n in nodes),
        next_after=nodes[-1].id if len(page) > request.limit else None,
    )


def _counts(group: queries.Group) -> dict[str, Any]:
    return {
        "nodes": group.nodes,
        "conforming": group.conforming,
        "drifted": group.drifted,
        "unreadable": group.unreadable,
        "unobserved": group.unobserved,
        "conformance_ratio": round(group.ratio, 6),
    }


def _sweep(row: sweeps.SweepRow | None) -> SweepState | None:
    if row is None:
        return None
    end = row.finished_at
    return SweepState(
        id=row.id,
        started_at=row.started_at,
        finished_at=end,
        seconds=(end - row.started_at).total_seconds() if end else None,
        total=row.total,
        done=row.done,
        unreadable=row.unreadable,
        error=row.error,
    )


async def fleet_status(
    conn: Conn, request: FleetStatusRequested, asker: Asker
) -> FleetStatusAnswered:
    """The fleet at a glance (``queries.fleet_status``), in one snapshot."""
    del request, asker
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        status = await queries.fleet_status(conn)
    return FleetStatusAnswered(
        fleet=Conformance(**_counts(status.total)),
        groups=tuple(
            PoolConformance(pool=pool, profile=profile, **_counts(g))
            for (pool, profile), g in sorted(status.groups.items())
        ),
        drifted_by_kind={DriftKind(k): n for k, n in sorted(status.drifted_by_kind.items())},
        sweep=_sweep(status.sweep),
        sweep_running=status.sweep_running,
        last_finished_sweep=_sweep(status.last_sweep),
    )


def _observation(source: ObservationSource, o: Observation) -> NodeObservation:
    return NodeObservation(
        source=source,
        readable=o.readable,
        error=o.error,
        unreadable_since=o.unreadable_since,
        observed_at=o.observed_at,
        sequence=o.sequence,
        components=dict(sorted(o.components.items())),
        conflicts={c: dict(m) for c, m in sorted(o.conflicts.items())},
        members=dict(sorted(o.members.items())),
        loaded_module=o.loaded_module,
        firmware_dirs=o.firmware_dirs,
    )


async def fleet_show(conn: Conn, request: FleetShowRequested, asker: Asker) -> FleetShowAnswered:
    """One node in full; ``not_found`` when it is not registered."""
    del asker
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        found = await queries.node_detail(conn, request.node_id)
    if found is None:
        raise Refusal("not_found", f"no node {request.node_id} in the registry")
    drift = found.drift
    return FleetShowAnswered(
        node=registered(found.node),
        observations=tuple(_observation(s, o) for s, o in sorted(found.observations.items())),
        pin_stack_hash=found.pin_stack_hash,
        drift=None
        if drift is None
        else DriftState(
            stack_hash=drift.stack_hash,
            since=drift.since,
            evaluated_at=drift.evaluated_at,
            items=drift.items,
        ),
        history=tuple(
            HistoryEntry(
                source=ObservationSource(h["source"]),
                item=h["item"],
                old=h["old"],
                new=h["new"],
                observed_at=dt.datetime.fromisoformat(h["observed_at"]),
            )
            for h in found.history
        ),
    )


async def fleet_drift(conn: Conn, request: FleetDriftRequested, asker: Asker) -> FleetDriftAnswered:
    """One page of the drift report."""
    del asker
    entries = await queries.drift_report(
        conn,
        include_informational=request.include_informational,
        after=request.after,
        limit=request.limit + 1,
    )
    page = entries[: request.limit]
    return FleetDriftAnswered(
        nodes=tuple(
            DriftedNode(
                node=e.node_id,
                site=e.site,
                pool=e.pool,
                profile=e.profile,
                stack_hash=e.stack_hash,
                since=e.since,
                items=e.items,
            )
            for e in page
        ),
        next_after=page[-1].node_id if len(entries) > request.limit else None,
    )


def remove_command(announce: Announce = unannounced) -> Command[FleetRemoveRequested]:
    """``fleet.remove``: forget nodes, all or none (``registry.remove_nodes``), each announced
    (``adapters.announce``) as the removal commits."""

    async def fleet_remove(
        conn: Conn, request: FleetRemoveRequested, asker: Asker
    ) -> FleetRemoveAnswered:
        del asker
        ids = list(dict.fromkeys(request.node_ids))
        missing = await registry.remove_nodes(conn, ids)
        if missing:
            raise Refusal(
                "not_found", f"not in the registry, nothing removed: {', '.join(missing)}"
            )
        version = await registry.removed_version(conn)
        await announce(dict.fromkeys(ids, version))
        return FleetRemoveAnswered(removed=tuple(ids))

    return Command(
        "fleet.remove", FleetRemoveRequested, FleetRemoveAnswered, fleet_remove, writes=True
    )


def golden_command(rules: CompatibilityRules) -> Command[FleetGoldenRequested]:
    """``fleet.golden``: the stack a known-good node runs, judged by the service's rules."""

    async def fleet_golden(
        conn: Conn, request: FleetGoldenRequested, asker: Asker
    ) -> FleetGoldenAnswered:
        try:
            stack = await queries.golden_stack(
                conn, request.node_id, rules=rules, today=asker.now.date()
            )
        except NotGolden as exc:
            raise Refusal("invalid", str(exc)) from None
        return FleetGoldenAnswered(stack=stack)

    return Command("fleet.golden", FleetGoldenRequested, FleetGoldenAnswered, fleet_golden)


class SweepsNow(Protocol):
    """Who carries out an on-demand sweep: the service's sweep worker (``sweep_worker``)."""

    async def sweep_now(self, nodes: Sequence[NodeEntry], by: str) -> SweepSummary: ...


def sweep_commands(worker: SweepsNow) -> tuple[Command[Any], ...]:
    """``fleet.sweep`` (carried out by the service's sweep worker, with the service's own
    credentials, while the request waits) and ``fleet.swept`` (each node's outcome)."""

    async def fleet_sweep(
        conn: Conn, request: FleetSweepRequested, asker: Asker
    ) -> FleetSweepAnswered:
        registered = await state.nodes(conn)
        if not registered:
            raise Refusal("invalid", "no nodes are registered (lockstep fleet import first)")
        asked = list(dict.fromkeys(request.node_ids)) or sorted(registered)
        missing = [i for i in asked if i not in registered]
        if missing:
            raise Refusal("not_found", f"not in the registry: {', '.join(missing)}")
        try:
            summary = await worker.sweep_now([registered[i] for i in asked], by=asker.identity)
        except SweepBusyError as exc:
            raise Refusal(
                "conflict", f"{exc}; lockstep fleet status --watch follows it to the end"
            ) from None
        row = await conn.fetchrow("SELECT * FROM sweeps WHERE id = $1", summary.sweep_id)
        return FleetSweepAnswered(
            sweep=_sweep(None if row is None else sweeps.SweepRow(**dict(row))),
            drift_detected=len(summary.outcome.detected),
            drift_resolved=len(summary.outcome.resolved),
        )

    return (
        Command("fleet.sweep", FleetSweepRequested, FleetSweepAnswered, fleet_sweep, writes=True),
        Command("fleet.swept", FleetSweptRequested, FleetSweptAnswered, fleet_swept),
    )


async def fleet_swept(conn: Conn, request: FleetSweptRequested, asker: Asker) -> FleetSweptAnswered:
    """One page of a sweep's node outcomes: the Redfish reports it committed (a node's report
    carries the number of the sweep that read it)."""
    del asker
    rows = await conn.fetch(
        "SELECT node_id, readable, error, components, conflicts, members FROM observations"
        " WHERE source = 'redfish' AND sequence = $1 AND ($2::text IS NULL OR node_id > $2)"
        " ORDER BY node_id LIMIT $3",
        request.sweep_id,
        request.after,
        request.limit + 1,
    )
    page = rows[: request.limit]
    nodes = []
    for r in page:
        members = {k: v or UNAVAILABLE for k, v in json.loads(r["members"]).items()}
        # Grouped as the sweep grouped them, by the profile chosen for the BMC then.
        versions = {Component(c): v for c, v in json.loads(r["components"]).items()}
        conflicts = {Component(c): m for c, m in json.loads(r["conflicts"]).items()}
        nodes.append(
            SweptNode(
                id=r["node_id"],
                readable=r["readable"],
                error=r["error"],
                components=dict(sorted(stack_of(versions, conflicts).items())),
                members=dict(sorted(members.items())),
            )
        )
    return FleetSweptAnswered(
        nodes=tuple(nodes),
        next_after=page[-1]["node_id"] if len(rows) > request.limit else None,
    )


def commands(announce: Announce = unannounced) -> tuple[Command[Any], ...]:
    """The fleet's read commands and ``fleet.remove``, which announces with ``announce``."""
    return (
        Command("fleet.list", FleetListRequested, FleetListAnswered, fleet_list),
        Command("fleet.status", FleetStatusRequested, FleetStatusAnswered, fleet_status),
        Command("fleet.show", FleetShowRequested, FleetShowAnswered, fleet_show),
        Command("fleet.drift", FleetDriftRequested, FleetDriftAnswered, fleet_drift),
        remove_command(announce),
    )


COMMANDS: tuple[Command[Any], ...] = commands()
"""What ``commands`` answers (the router's ``ANSWERS``); the service's own, in ``app.py``,
announce on the bus."""
