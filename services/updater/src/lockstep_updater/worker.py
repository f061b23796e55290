"""The updater's work loop: ``workers`` executors claim node work items from the database
until the service stops (a ``lockstep_common.service.Worker``).

Level-triggered: nothing is driven by the message that recorded the work, so a restart, a
second updater process or a lapsed lease all end the same way: the next claim re-runs the
step the item is in (``executor``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from lockstep_common.periodic import Every
from lockstep_common.service import Resources
from lockstep_redfish.image_server import ImageServer
from lockstep_redfish.tasks import TaskPolicy
from lockstep_redfish.update import UpdatePolicy
from lockstep_updater.executor import Executor, ExecutorPolicy
from lockstep_updater.idle import IdleClaims
from lockstep_updater.settings import Settings

log = logging.getLogger(__name__)


ExecutorFactory = Callable[[Resources, ImageServer | None], Executor]
"""Builds the executor on the started service's connections, with the image server the worker
opened (None: none configured); ``app.py`` chooses its store, fleet query, scheduler, images
and node agent."""


def executor_policy(settings: Settings) -> ExecutorPolicy:
    """The executor's leases, waits and Redfish polling, as ``settings`` give them."""
    poll = settings.redfish_poll_s
    return ExecutorPolicy(
        lease_s=settings.lease_s,
        retry_s=settings.retry_s,
        drain_poll_s=settings.drain_poll_s,
        drain_deadline_s=settings.drain_deadline_s,
        remedy_max_unavailable=settings.remedy_max_unavailable,
        task_hold_s=settings.task_hold_s,
        bmc_profiles=dict(settings.bmc_profiles),
        push_gap_s=settings.push_gap_s,
        bmc_sessions_max=settings.bmc_sessions_max,
        update=UpdatePolicy(
            tasks=TaskPolicy(poll_s=poll, min_poll_s=min(poll, 0.5)),
            settle_s=settings.verify_settle_s,
            read_poll_s=poll,
        ),
    )


class UpdaterWorker:
    """Runs ``settings.workers`` claim loops on the executor ``executor`` builds, and serves
    images from ``image_server`` (when given) for as long as they run."""

    def __init__(
        self,
        settings: Settings,
        executor: ExecutorFactory,
        image_server: Callable[[], ImageServer] | None = None,
    ) -> None:
        self.settings = settings
        self.executor = executor
        self.image_server = image_server
        self.idle = IdleClaims(settings.worker_poll_s)
        self.policy = executor_policy(settings)

    async def run(self, resources: Resources, stopping: asyncio.Event) -> None:
        """Claim and run steps until stopped."""
        s = self.settings
        async with contextlib.AsyncExitStack() as stack:
            server = None
            if self.image_server is not None:
                server = self.image_server()
                await stack.enter_async_context(server)
            executor = self.executor(resources, server)
            stack.push_async_callback(executor.close)
            loops = [self._loop(executor, stopping) for _ in range(s.workers)]
            await asyncio.gather(
                *loops,
                self._reaper(executor, stopping),
                self._redriver(executor, stopping),
                self._sweeper(executor, stopping),
            )

    async def _reaper(self, executor: Executor, stopping: asyncio.Event) -> None:
        """Every ``reap_interval_s``, give back the drains of workers that died (``reap``): a
        node is left cordoned without an owner at most ``orphan_ttl_s`` + that interval; and
        the drains that landed after their item ended (``give_back_strays``), within one."""
        s = self.settings

        async def one_round() -> None:
            await executor.reap(s.orphan_ttl_s)
            await executor.give_back_strays()

        every = Every(s.reap_interval_s, what="updater reaper")
        await every.run(one_round, stopping)

    async def _sweeper(self, executor: Executor, stopping: asyncio.Event) -> None:
        """Every ``budget_recheck_s``, wake parked nodes pool by pool (``sweep_parked``)."""
        every = Every(self.policy.budget_recheck_s, what="updater parked sweep", wait_first=True)
        await every.run(executor.sweep_parked, stopping)

    async def _redriver(self, executor: Executor, stopping: asyncio.Event) -> None:
        """Every half ``wave_redrive_s``, publish again the completions nobody acted on
        (``Executor.redrive_completions``): one is re-driven within 1.5 intervals."""
        s = self.settings
        every = Every(s.wave_redrive_s / 2, what="updater re-drive")
        await every.run(
            lambda: executor.redrive_completions(s.wave_redrive_s, s.wave_redrives_max), stopping
        )

    async def _loop(self, executor: Executor, stopping: asyncio.Event) -> None:
        executor.on_claim = self.idle.found  # every loop shares the executor and the idle gate
        executor.chains = lambda: not stopping.is_set()
        # A step that ran is followed at once by the next claim; with nothing claimable, one
        # idle loop polls and the others park (``IdleClaims``), in place of a fixed interval.
        every = Every(self.settings.worker_poll_s, what="updater worker step", pause=self._idle)
        await every.run(executor.step, stopping)

    async def _idle(self, stopping: asyncio.Event, _seconds: float) -> None:
        await self.idle.wait(stopping)
