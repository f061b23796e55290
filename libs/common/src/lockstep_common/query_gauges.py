"""Gauges read from a service's own tables by SQL, refreshed on an interval.

State that lives in PostgreSQL (work items per step, rollouts per state, unpublished outbox
rows) is shared by every replica and survives restarts, so it is measured there rather than
counted in one process: any replica reports the same numbers, and a restarted one reports the
truth at once instead of counting from zero.

``QueryGauges`` is a Prometheus collector (``prometheus_client`` "custom collector") and a
service ``Worker``: the worker runs each query every ``interval_s`` and keeps the rows; a scrape
renders the last rows. Before the first successful refresh a family has no samples (not zeros),
so ``delta()`` over a restart never sees a false jump from 0.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import asyncpg
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from lockstep_common.db import OUTAGE
from lockstep_common.periodic import Every

if TYPE_CHECKING:
    from lockstep_common.service import Resources

log = logging.getLogger(__name__)

# Prometheus' default scrape interval: refreshing more often than it is scraped buys nothing.
REFRESH_S = 15.0


class Fetches(Protocol):
    """A connection's ``fetch`` (asyncpg's connection and pool proxy both have it)."""

    async def fetch(self, query: str) -> list[Any]:
        """The rows ``query`` returns."""
        ...


@dataclass(frozen=True, slots=True)
class QueryGauge:
    """One gauge family: ``sql`` returns one row per sample, its label values in
    ``labels`` order, then the value (NULL reads as 0)."""

    name: str
    documentation: str
    sql: str
    labels: tuple[str, ...] = ()
    fill: tuple[tuple[str, ...], ...] = ()
    """Label values reported as 0 when the query returns no row for them (every state of a
    state machine, so a dashboard shows 0 rather than nothing)."""


class QueryGauges(Collector):
    """Renders the last rows of each :class:`QueryGauge`; ``run`` refreshes them."""

    def __init__(
        self,
        registry: CollectorRegistry,
        gauges: Sequence[QueryGauge],
        *,
        interval_s: float = REFRESH_S,
    ) -> None:
        self.gauges = tuple(gauges)
        self.interval_s = interval_s
        self._values: dict[str, dict[tuple[str, ...], float]] = {}
        registry.register(self)

    def describe(self) -> Iterable[Metric]:
        """The families, without samples: lets the registry refuse a duplicate name."""
        return [GaugeMetricFamily(g.name, g.documentation, labels=g.labels) for g in self.gauges]

    def collect(self) -> Iterator[Metric]:
        """One family per gauge refreshed at least once."""
        for gauge in self.gauges:
            values = self._values.get(gauge.name)
            if values is None:
                continue
            family = GaugeMetricFamily(gauge.name, gauge.documentation, labels=gauge.labels)
            for labels, value in sorted(values.items()):
                family.add_metric(list(labels), value)
            yield family

    def samples(self, name: str) -> dict[tuple[str, ...], float]:
        """What the next scrape renders for ``name``: label values to value (empty before
        the first refresh)."""
        return dict(self._values.get(name, {}))

    def apply(self, gauge: QueryGauge, rows: Iterable[Sequence[Any]]) -> None:
        """Replace ``gauge``'s samples by ``rows`` (label values..., value): label sets no
        longer returned disappear, ``fill`` ones become 0."""
        width = len(gauge.labels)
        values = dict.fromkeys(gauge.fill, 0.0)
        for row in rows:
            if len(row) != width + 1:
                raise ValueError(f"{gauge.name}: a row has {len(row)} columns, not {width + 1}")
            value = 0.0 if row[width] is None else float(row[width])
            values[tuple(str(v) for v in row[:width])] = value if math.isfinite(value) else 0.0
        self._values[gauge.name] = values

    async def refresh(self, conn: Fetches) -> None:
        """Run every query on ``conn``; a failing query keeps its family's last samples."""
        for gauge in self.gauges:
            try:
                self.apply(gauge, await conn.fetch(gauge.sql))
            except asyncpg.PostgresError as exc:
                log.warning("gauge %s not refreshed: %s", gauge.name, exc)

    async def run(self, resources: Resources, stopping: asyncio.Event) -> None:
        """Refresh every ``interval_s`` until stopped; an outage is logged, never fatal."""
        every = Every(
            self.interval_s,
            what="gauge refresh",
            expected=OUTAGE,
        )
        await every.run(lambda: self._refresh_from(resources), stopping)

    async def _refresh_from(self, resources: Resources) -> None:
        async with resources.pool.acquire() as conn:
            await self.refresh(conn)


RUNTIME_GAUGES = (
    QueryGauge(
        "lockstep_outbox_pending_rows",
        "Outbox rows committed but not yet published to JetStream",
        "SELECT count(*) FROM outbox WHERE published_at IS NULL",
    ),
    QueryGauge(
        "lockstep_outbox_oldest_pending_age_seconds",
        "Age of the oldest unpublished outbox row (0 when none): how far events lag commits",
        "SELECT extract(epoch FROM now() - min(created_at)) FROM outbox WHERE published_at IS NULL",
    ),
    QueryGauge(
        "lockstep_dead_letters_stored",
        "Dead letters kept in the service's table (until replayed, purged or past retention)",
        "SELECT count(*) FROM dead_letters",
    ),
)
"""What every service reports about its own outbox and dead letters (``ServiceApp``)."""
