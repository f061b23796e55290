"""Sample partitions kept ahead and pruned: once as the service starts, then every
``maintenance_interval_s`` (the shared retention cadence of outbox, inbox and dead letters)."""

from __future__ import annotations

import asyncio
import logging

from lockstep_common.clock import SYSTEM_CLOCK, Clock
from lockstep_common.db import OUTAGE
from lockstep_common.periodic import Every
from lockstep_common.service import Resources
from lockstep_healthgate.adapters import partitions

log = logging.getLogger(__name__)


class PartitionKeeper:
    """A ``lockstep_common.service.Worker`` creating day partitions ahead and dropping old ones."""

    def __init__(
        self,
        *,
        interval_s: float,
        ahead_days: int,
        retention_s: float,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._clock = clock
        self._interval_s = interval_s
        self._ahead_days = ahead_days
        self._retention_s = retention_s

    async def run(self, resources: Resources, stopping: asyncio.Event) -> None:
        """Maintain until stopped."""
        every = Every(
            self._interval_s,
            what="sample partition maintenance",
            expected=OUTAGE,
        )
        await every.run(lambda: self.maintain(resources), stopping)

    async def maintain(self, resources: Resources) -> None:
        """One round: the partitions ahead created, the expired ones dropped."""
        async with resources.pool.acquire() as conn:
            created, dropped = await partitions.maintain(
                conn,
                now=self._clock.now(),
                ahead_days=self._ahead_days,
                retention_s=self._retention_s,
            )
        if created or dropped:
            log.info(
                "sample partitions: created %s; dropped %s",
                ", ".join(created) or "none",
                ", ".join(dropped) or "none",
            )
