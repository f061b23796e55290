"""The inventory's Prometheus gauges, refreshed from the same query as ``lockstep fleet status``."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from prometheus_client import CollectorRegistry, Gauge

from lockstep_common.db import OUTAGE
from lockstep_common.service import Resources
from lockstep_common.vocabulary import DriftKind
from lockstep_inventory.queries import INFORMATIONAL, FleetStatus, fleet_status

log = logging.getLogger(__name__)


class FleetGauges:
    """Conformance ratio, drifted nodes by kind, unreadable BMCs, sweep duration."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.conformance = Gauge(
            "lockstep_inventory_conformance_ratio",
            "Share of nodes at their pin with no drift (unknown items aside), by pool/profile",
            ["pool", "profile"],
            registry=r,
        )
        self.fleet_conformance = Gauge(
            "lockstep_inventory_fleet_conformance_ratio",
            "Share of registered nodes that conform",
            registry=r,
        )
        self.drifted = Gauge(
            "lockstep_inventory_drifted_nodes",
            "Nodes whose drift set has at least one item of this kind",
            ["kind"],
            registry=r,
        )
        self.unreadable = Gauge(
            "lockstep_inventory_unreadable_bmcs", "BMCs the last sweep could not read", registry=r
        )
        self.unobserved = Gauge(
            "lockstep_inventory_unobserved_nodes", "Registered nodes never reported", registry=r
        )
        self.sweep_seconds = Gauge(
            "lockstep_inventory_sweep_duration_seconds",
            "Duration of the last finished sweep",
            registry=r,
        )
        self.sweep_finished = Gauge(
            "lockstep_inventory_last_sweep_timestamp_seconds",
            "Unix time the last sweep finished (alert when it grows old)",
            registry=r,
        )

    def update(self, status: FleetStatus) -> None:
        self.conformance.clear()
        for (pool, profile), group in status.groups.items():
            self.conformance.labels(pool, profile).set(group.ratio)
        self.fleet_conformance.set(status.total.ratio)
        for kind in DriftKind:
            if kind not in INFORMATIONAL:
                self.drifted.labels(str(kind)).set(status.drifted_by_kind.get(str(kind), 0))
        self.unreadable.set(status.total.unreadable)
        self.unobserved.set(status.total.unobserved)
        last = status.last_sweep
        if last is not None and last.finished_at is not None:
            self.sweep_seconds.set((last.finished_at - last.started_at).total_seconds())
            self.sweep_finished.set(last.finished_at.timestamp())


class GaugeRefresher:
    """A service worker that refreshes :class:`FleetGauges` every ``interval_s``."""

    def __init__(self, gauges: FleetGauges, interval_s: float) -> None:
        self.gauges = gauges
        self.interval_s = interval_s
        self.poke = asyncio.Event()  # set after a sweep, for a refresh without waiting

    async def run(self, resources: Resources, stopping: asyncio.Event) -> None:
        while not stopping.is_set():
            self.poke.clear()  # before the query: a poke during it asks for another refresh
            try:
                async with resources.pool.acquire() as conn:
                    self.gauges.update(await fleet_status(conn))
            except OUTAGE as exc:
                log.warning("fleet gauges not refreshed: %s", exc)
            waits = [asyncio.ensure_future(e.wait()) for e in (stopping, self.poke)]
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED), self.interval_s
                )
            for w in waits:
                w.cancel()
