"""The service's Redfish sweeps (a ``Worker``): periodic (the first at start, then every
interval) and on demand (``lockstep fleet sweep``, asked over the bus: ``sweep_now``). Either way
the service reads the BMCs with its own credentials; the operator CLI never holds them."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence

import asyncpg

from lockstep_common.compatibility.rules import CompatibilityRules
from lockstep_common.db import OUTAGE
from lockstep_common.periodic import Every
from lockstep_common.service import Resources
from lockstep_inventory.adapters import state
from lockstep_inventory.domain.fleet_file import NodeEntry
from lockstep_inventory.fleet_metrics import GaugeRefresher
from lockstep_inventory.settings import Settings
from lockstep_inventory.sweeping import ReaderOf, SweepBusyError, SweepSummary, run_sweep

log = logging.getLogger(__name__)


class SweepWorker:
    """Sweeps the registered fleet every ``sweep_interval_s``; one sweeper across replicas."""

    def __init__(
        self,
        settings: Settings,
        source: str,
        rules: CompatibilityRules,
        gauges: GaugeRefresher | None = None,
        *,
        read: ReaderOf,
    ) -> None:
        self.settings = settings
        self.source = source
        self.rules = rules
        self.gauges = gauges
        self.read = read  # the BMC reader, built in app.py
        self._pool: asyncpg.Pool | None = None
        self._asked: str | None = None  # who asked for the on-demand sweep under way

    async def sweep_now(self, nodes: Sequence[NodeEntry], by: str) -> SweepSummary:
        """Sweep ``nodes`` now (after a periodic sweep already running), committed like the
        periodic sweep; ``by`` (who asked) goes into the sweep's record.

        One on-demand sweep at a time: another asked meanwhile raises :class:`SweepBusyError`
        at once rather than queueing, so that impatient askers cannot hold the pool's
        connections (each waiting request holds one) that the consumers need.
        """
        if self._pool is None:
            raise RuntimeError("the inventory is still starting: ask again")
        if self._asked is not None:
            raise SweepBusyError(f"a sweep {self._asked} asked for is running")
        self._asked = by
        try:
            return await run_sweep(
                self._pool,
                nodes,
                self.settings,
                by=by,
                source=self.source,
                rules=self.rules,
                results_of=self.read(nodes),
                wait=True,
            )
        finally:
            self._asked = None
            if self.gauges is not None:
                self.gauges.poke.set()

    async def run(self, resources: Resources, stopping: asyncio.Event) -> None:
        self._pool = resources.pool
        if self.settings.sweep_interval_s == 0:
            log.info("periodic sweeps are off (sweep_interval_s=0)")
            return
        every = Every(self.settings.sweep_interval_s, what="periodic sweep")
        await every.run(lambda: self._sweep_until_stopped(resources.pool, stopping), stopping)

    async def _sweep_until_stopped(self, pool: asyncpg.Pool, stopping: asyncio.Event) -> None:
        """One sweep, cancelled if the service stops meanwhile (the sweeper deletes its
        sessions as it unwinds)."""
        sweep = asyncio.ensure_future(self._sweep_once(pool))
        stop = asyncio.ensure_future(stopping.wait())
        await asyncio.wait([sweep, stop], return_when=asyncio.FIRST_COMPLETED)
        if not sweep.done():
            sweep.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sweep
        stop.cancel()

    async def _sweep_once(self, pool: asyncpg.Pool) -> None:
        try:
            async with pool.acquire() as conn:
                nodes = list((await state.nodes(conn)).values())
            if not nodes:
                log.info("no registered nodes to sweep")
                return
            await run_sweep(
                pool,
                nodes,
                self.settings,
                by="service",
                source=self.source,
                rules=self.rules,
                results_of=self.read(nodes),
                wait=False,
            )
        except SweepBusyError:
            log.info("another sweeper holds the sweep lock; skipping this round")
        except OUTAGE as exc:
            log.warning("sweep failed (will retry next round): %s", exc)
        except Exception:
            # Anything else is a bug or a bad registry row: log it and keep sweeping next
            # round rather than taking the service (and its consumers) down with it.
            log.exception("sweep failed unexpectedly (will retry next round)")
        finally:
            if self.gauges is not None:
                self.gauges.poke.set()
