"""``fleet.query`` request/reply (core NATS): the registered fleet, a page at a time.

How the planner and the updater learn the fleet without reading the inventory's tables: a
page of up to 500 nodes in node id order, each with its place (site, rack, pool, fabric domain,
power side), how to reach its BMC (credentials by reference only), its last observed versions
(a component whose members disagree as each member's version), whether its BMC answered and
its current drift. Ask again with ``after`` = the answer's ``next_after`` until it is None; one
page is read in one snapshot.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from lockstep_common import subjects
from lockstep_common.db import Conn
from lockstep_common.events.v1 import FleetNode, FleetQueryAnswered, FleetQueryRequested
from lockstep_common.subjects import Namespace
from lockstep_common.vocabulary import Component, ObservationSource
from lockstep_inventory.adapters import state
from lockstep_inventory.domain.fleet_file import NodeEntry
from lockstep_inventory.domain.ingestion import DriftRow
from lockstep_inventory.domain.observation import Observation, merge
from lockstep_inventory.responder import Responder

QUEUE = "inventory-fleet-query"


def fleet_node(
    node: NodeEntry,
    reports: Mapping[ObservationSource, Observation],
    drift: DriftRow | None,
    version: int = 0,
) -> FleetNode:
    """One node as the answer carries it. Versions: the BMC's, then the agent's for what the
    agent reports (in-band software); readability: the BMC's; ``version``: its registry
    entry's."""
    observed: dict[Component, str] = {}
    for source in (ObservationSource.REDFISH, ObservationSource.AGENT):
        if source in reports:
            observed.update(reports[source].components)
    # A component whose members disagree (a GB200 tray's two NIC families) is part of the
    # node's stack too: without it, nodes differing only there look alike to the planner.
    conflicts = {c: dict(m) for c, m in merge(reports).conflicts.items() if c not in observed}
    bmc = reports.get(ObservationSource.REDFISH)
    return FleetNode(
        node_id=node.id,
        site=node.site,
        profile=node.profile,
        supplier=node.supplier,
        rack=node.rack,
        pool=node.pool,
        fabric_domain=node.fabric_domain,
        power_side=node.power_side,
        bmc_url=node.bmc_url,
        allow_plain_http=node.allow_plain_http,
        credentials=node.credentials,
        readable=None if bmc is None else bmc.readable,
        observed=observed,
        conflicts=conflicts,
        drift=drift.items if drift is not None else (),
        version=version,
    )


async def answer_fleet_query(
    conn: Conn, request: FleetQueryRequested, now: dt.datetime
) -> FleetQueryAnswered:
    """One page, read in one snapshot (read-only)."""
    del now  # the answer does not depend on the time asked
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        page = await state.fleet_page(conn, request.scope, request.after, request.limit + 1)
        nodes = page[: request.limit]
        ids = [n.id for n in nodes]
        observed = await state.observations(conn, ids)
        drift = await state.drift(conn, ids)
        versions = await state.versions(conn, ids)
    return FleetQueryAnswered(
        nodes=tuple(
            fleet_node(n, observed.get(n.id, {}), drift.get(n.id), versions.get(n.id, 0))
            for n in nodes
        ),
        next_after=nodes[-1].id if len(page) > request.limit else None,
    )


def fleet_query_responder(namespace: Namespace, source: str) -> Responder[Any]:
    """The worker answering ``fleet.query``."""
    return Responder(
        namespace.wire(subjects.fleet_query()),
        FleetQueryRequested,
        answer_fleet_query,
        source=source,
        queue=QUEUE,
    )
