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

from lockstep_common.envelope import source_of
from lockstep_common.fleet_query import FleetQuery
from lockstep_common.periodic import Every
from lockstep_common.service import Resources
from lockstep_common.subjects import Namespace
from lockstep_redfish.image_server import ImageServer
from lockstep_redfish.tasks import TaskPolicy
from lockstep_redfish.update import UpdatePolicy
from lockstep_updater.adapters.agent_commands import NatsAgentCommands
from lockstep_updater.adapters.images import BundleImages
from lockstep_updater.adapters.node_agent import HttpNodeAgent
from lockstep_updater.adapters.node_agent_nats import READ_TIMEOUT_S, NatsNodeAgent
from lockstep_updater.adapters.repository import PostgresStore
from lockstep_updater.executor import Executor, ExecutorPolicy
from lockstep_updater.idle import IdleClaims
from lockstep_updater.ports import NodeAgent
from lockstep_updater.schedulers import scheduler_for
from lockstep_updater.settings import Settings

log = logging.getLogger(__name__)


class UpdaterWorker:
    """Runs ``settings.workers`` claim loops."""

    def __init__(self, settings: Settings, namespace: Namespace, name: str) -> None:
        self.settings = settings
        self.namespace = namespace
        self.source = source_of(name)
        self.idle = IdleClaims(settings.worker_poll_s)
        poll = settings.redfish_poll_s
        self.policy = ExecutorPolicy(
            lease_s=settings.lease_s,
            retry_s=settings.retry_s,
            drain_poll_s=settings.drain_poll_s,
            drain_deadline_s=settings.drain_deadline_s,
            remedy_max_unavailable=settings.remedy_max_unavailable,
            task_hold_s=settings.task_hold_s,
            update=UpdatePolicy(
                tasks=TaskPolicy(poll_s=poll, min_poll_s=min(poll, 0.5)),
                settle_s=settings.verify_settle_s,
                read_poll_s=poll,
            ),
        )

    def executor(self, resources: Resources, server: ImageServer | None = None) -> Executor:
        s = self.settings
        return Executor(
            PostgresStore(resources.pool, self.source),
            FleetQuery(resources.nc, self.namespace, self.source, timeout_s=s.fleet_timeout_s),
            scheduler_for(s),
            BundleImages(s.bundle_roots),
            self.policy,
            image_server=server,
            agent=self.node_agent(resources),
        )

    def node_agent(self, resources: Resources) -> NodeAgent | None:
        """The channel ``agent_channel`` names (None: none configured)."""
        s = self.settings
        if s.agent_channel == "nats":
            commands = NatsAgentCommands(resources.nc, self.namespace, self.source)
            reads = NatsAgentCommands(
                resources.nc, self.namespace, self.source, timeout_s=READ_TIMEOUT_S
            )
            return NatsNodeAgent(commands, s.agent_package, reads)
        if s.agent_url is None:
            return None
        return HttpNodeAgent(s.agent_url, s.agent_credentials)

    async def run(self, resources: Resources, stopping: asyncio.Event) -> None:
        """Claim and run steps until stopped."""
        s = self.settings
        async with contextlib.AsyncExitStack() as stack:
            server = None
            if s.image_server_host is not None:
                server = ImageServer(s.image_server_host, s.image_server_port)
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
