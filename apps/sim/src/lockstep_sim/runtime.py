"""``FleetRuntime``: one simulated fleet, its BMCs, its scheduler and (optionally) its agents.

The three emulations share one fleet model (``fleet.build_fleet``): the same node ids, sites
and pools everywhere. What they do *not* share yet is state: the agents' in-band software
(driver, loaded module, GSP firmware) is independent of the BMC firmware the Redfish emulator
serves, and a scheduler drain does not touch either. Coupling them (a BMC activation rebooting
the agent, a reboot taking the scheduler node down) is later work.

Clocks: ``time_scale`` keeps the BMC emulator's meaning (real seconds per simulated minute),
so the scheduler's simulated clock runs ``60 / time_scale`` times faster than real time, like
the BMCs. The agents report every ``cadence_s`` *real* seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import shutil
import tempfile
from collections import defaultdict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from lockstep_sim.agents.health_model import Conditions
from lockstep_sim.agents.software import NodeSoftware
from lockstep_sim.drifts import DriftControl
from lockstep_sim.fleet import Node
from lockstep_sim.health_scenarios import conditions_for
from lockstep_sim.injection import FaultControl
from lockstep_sim.listening import ALL_INTERFACES
from lockstep_sim.options import SimOptions
from lockstep_sim.scheduler.http import make_app
from lockstep_sim.scheduler.model import Scheduler
from lockstep_sim.simulator import Simulator
from lockstep_sim.started import Started

if TYPE_CHECKING:
    from nats.aio.client import Client

    from lockstep_common.natsconn import NatsAccess
    from lockstep_common.subjects import Namespace
    from lockstep_sim.agents.commands import LazyExecutor, SimHost
    from lockstep_sim.agents.publisher import AgentFleet

log = logging.getLogger(__name__)
SCHEDULER_HOST = "127.0.0.1"
AGENT_CONNECTS = 64
"""Node agents connecting at once (``agent_access``): each is a TLS handshake and an nkey
signature on a shared machine."""


def _degraded(node: Node) -> bool:
    return node.degraded_after_activation


def _conditions(faults: FaultControl, node: Node) -> Conditions:
    return conditions_for(faults.plan, node.id, node.rack)


def fleet_pools(fleet: list[Node]) -> dict[str, list[str]]:
    """Pool name -> node ids, in fleet order (the scheduler's view of the fleet)."""
    pools: dict[str, list[str]] = defaultdict(list)
    for node in fleet:
        pools[node.pool].append(node.id)
    return dict(pools)


def fleet_sites(fleet: list[Node]) -> dict[str, list[str]]:
    """Site -> node ids, in fleet order (one agent fleet publishes per site)."""
    sites: dict[str, list[str]] = defaultdict(list)
    for node in fleet:
        sites[node.site].append(node.id)
    return dict(sites)


class FleetRuntime(Started):
    """``async with FleetRuntime(SimOptions(4, port=0), scheduler_port=0) as rt: rt.bmc_url(...)``.

    Starts the BMC emulator, the scheduler HTTP API on ``SCHEDULER_HOST:scheduler_port`` (every
    interface with ``options.advertise``, named by it) and,
    only when ``nats`` is given, one ``AgentFleet`` per site publishing telemetry into
    namespace ``namespace``, connected as the node agents' identity, or, with
    ``agent_access`` (node id -> its access), every node's agent on its own connection as its
    own identity, allowed its own node's subjects only. The streams are the
    services' (or an administrator's) to create: ``create_streams`` creates them first, for an
    open development server with no service running. Stops in reverse: agents, then
    scheduler, then BMCs. Port 0 picks a free port.

    With NATS, every node's agent also answers the updater's in-band commands on
    ``agent.command.<site>.<node>`` through the real agent's command executor
    (``lockstep_agent.commands``; its journal under ``commands_dir/<node>/``, a temporary
    directory removed at stop when None) on a simulated host (``agents.commands.SimHost``,
    serving ``packages``: version -> package bytes). Without NATS, ``answer_commands`` puts a
    node's agent on a connection of the caller's. There is no other command path: every step
    an agent carried out is in ``agent_ledger``.
    """

    def __init__(
        self,
        options: SimOptions,
        *,
        scheduler_port: int = 8001,
        nats: NatsAccess | None = None,
        agent_access: Callable[[str], NatsAccess] | None = None,
        namespace: str = "lockstep",
        cadence_s: float = 10.0,
        create_streams: bool = False,
        commands_dir: Path | None = None,
        packages: Mapping[str, bytes] | None = None,
    ) -> None:
        self.simulator = Simulator(options)
        self.fleet = self.simulator.fleet
        self.scheduler = Scheduler(
            fleet_pools(self.fleet), time_scale=60.0 / options.time_scale, seed=options.seed
        )
        self.scheduler_port = scheduler_port
        self.scheduler_host = SCHEDULER_HOST if options.advertise is None else ALL_INTERFACES
        self.advertise = options.advertise
        self.nats = nats
        self.agent_access = agent_access
        self._agent_ncs: list[Client] = []
        self.create_streams = create_streams
        self.commands_dir = commands_dir
        self._temporary: Path | None = None
        self.packages = packages
        self.command_hosts: dict[str, SimHost] = {}
        """Each node's simulated host, with every program the agent ran on it (``ran``)."""
        self._executors: list[LazyExecutor] = []
        self.namespace = namespace
        self.cadence_s = cadence_s
        self.seed = options.seed
        self.agent_ledger: list[dict[str, Any]] = []
        """Every in-band step the agents carried out or had refused, in order (``SimHost``)."""
        self.agents: list[AgentFleet] = []
        # In-band state of every node: published as telemetry, and read and changed by the
        # agents' commands, only when NATS is given.
        profiles = {node.id: node.profile for node in self.fleet}
        # The health series runs on the simulator's clock: a report every cadence_s real
        # seconds is cadence_s * 60 / time_scale simulated ones (its diurnal drift follows it).
        simulated_cadence_s = cadence_s * 60.0 / options.time_scale
        self.software = {
            node_id: NodeSoftware(
                node_id, options.seed, profile=profiles[node_id], cadence_s=simulated_cadence_s
            )
            for node_ids in fleet_sites(self.fleet).values()
            for node_id in node_ids
        }
        for node_id, software in self.software.items():
            node = self.simulator.bmc(node_id).node
            software.firmware_degraded = functools.partial(_degraded, node)
            # Health scenarios (thermal event, network problem) live in the simulator's fault
            # plan: PUT /faults starts and ends them for the agents too.
            software.conditions = functools.partial(_conditions, self.simulator.faults, node)
        self.simulator.drifts.software = self.software
        for node in self.fleet:
            self.simulator.bmc(node.id).annotate = functools.partial(self._scheduler_view, node.id)
        self._nc: Client | None = None
        self._scheduler_runner: web.AppRunner | None = None

    def _scheduler_view(self, node_id: str) -> dict[str, Any]:
        """The node's scheduler state and drain owner, added to every BMC ledger entry: the
        ledger then shows whether a node was drained when its BMC accepted a flash."""
        self.scheduler.tick()
        node = self.scheduler.node(node_id)
        drained_by = node.drain.by if node.drain is not None else None
        return {"scheduler_state": node.state.value, "drained_by": drained_by}

    @property
    def drifts(self) -> DriftControl:
        """Drift scenarios over BMCs and agents (also served as ``/scenario``; see drifts)."""
        return self.simulator.drifts

    def bmc_url(self, node_id: str) -> str:
        """Base URL of one node's BMC (``/redfish/v1`` lives under it)."""
        return self.simulator.bmc_url(node_id)

    @property
    def fleet_url(self) -> str:
        """Where the fleet list (``/fleet.json``) is served."""
        return f"{self.simulator.base_url}/fleet.json"

    @property
    def scheduler_url(self) -> str:
        """Base URL of the scheduler API (``/scheduler/nodes`` ... live under it)."""
        return f"http://{self.advertise or SCHEDULER_HOST}:{self.scheduler_port}"

    def telemetry_subjects(self) -> list[str]:
        """Wire subjects (with wildcards) the agents publish to; empty without NATS."""
        if self.nats is None and self.agent_access is None:
            return []
        return [
            f"{self.namespace}.telemetry.observed.{kind}.{site}.*"
            for site in fleet_sites(self.fleet)
            for kind in ("inventory", "health")
        ]

    async def start(self) -> None:
        """Start BMCs, scheduler and agents; on failure, stop whatever did start."""
        try:
            await self.simulator.start()
            await self._start_scheduler()
            if self.agent_access is not None:
                await self._start_own_agents(self.agent_access)
            elif self.nats is not None:
                await self._start_agents(self.nats)
        except BaseException:
            await self.stop()
            raise

    async def _start_scheduler(self) -> None:
        app = make_app(self.scheduler)
        runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.1)
        await runner.setup()
        self._scheduler_runner = runner
        site = web.TCPSite(runner, self.scheduler_host, self.scheduler_port, reuse_address=True)
        await site.start()
        self.scheduler_port = int(runner.addresses[0][1])

    async def _start_agents(self, access: NatsAccess) -> None:
        from lockstep_common.natsconn import connect
        from lockstep_common.subjects import Namespace
        from lockstep_common.topology import StreamPolicy, ensure_topology
        from lockstep_sim.agents.publisher import AgentFleet, FleetConfig

        self._nc = nc = await connect(access, name="lockstep-sim-agents")
        js = nc.jetstream()
        ns = Namespace(self.namespace)
        if self.create_streams:
            await ensure_topology(js, ns, StreamPolicy())
        for site, node_ids in fleet_sites(self.fleet).items():
            config = FleetConfig(
                site=site, nodes=len(node_ids), cadence_s=self.cadence_s, seed=self.seed
            )
            nodes = [self.software[node_id] for node_id in node_ids]
            self.agents.append(AgentFleet(js, ns, config, nodes))
            for node_id in node_ids:
                await self.answer_commands(nc, ns, node_id)
        for agents in self.agents:
            agents.start()

    async def answer_commands(self, nc: Client, ns: Namespace, node_id: str) -> None:
        """``node_id``'s agent answers the updater's in-band commands on ``nc`` from now on:
        the real agent's command channel and executor on the node's simulated host."""
        from lockstep_agent.command_channel import CommandChannel
        from lockstep_sim.agents.commands import LazyExecutor

        site = self.simulator.bmc(node_id).node.site
        if self.commands_dir is None:
            self.commands_dir = self._temporary = Path(tempfile.mkdtemp(prefix="lockstep-agents-"))
        journal = self.commands_dir / node_id / "commands.sqlite"
        executor = LazyExecutor(self.software[node_id], journal, self.packages, self.agent_ledger)
        self._executors.append(executor)
        self.command_hosts[node_id] = executor.host
        await CommandChannel(executor, ns, site, node_id).subscribe(nc)

    async def _start_own_agents(self, access: Callable[[str], NatsAccess]) -> None:
        """Every node's agent on its own connection, as its own identity (``access(node)``):
        allowed its own node's subjects only. Connected ``AGENT_CONNECTS`` at a time."""
        from lockstep_common.natsconn import connect
        from lockstep_common.subjects import Namespace
        from lockstep_sim.agents.publisher import AgentFleet, FleetConfig

        slots = asyncio.Semaphore(AGENT_CONNECTS)

        async def one(node_id: str) -> tuple[str, Client]:
            async with slots:
                # A ping a minute, not the services' every 5 s: 12,500 agents would otherwise
                # send the server 2,500 pings a second.
                nc = await connect(
                    access(node_id), name=f"lockstep-sim-agent-{node_id}", ping_interval=60
                )
                self._agent_ncs.append(nc)
                return node_id, nc

        connected = dict(await asyncio.gather(*(one(n) for n in self.software)))
        ns = Namespace(self.namespace)
        for site, node_ids in fleet_sites(self.fleet).items():
            config = FleetConfig(
                site=site, nodes=len(node_ids), cadence_s=self.cadence_s, seed=self.seed
            )
            nodes = [self.software[node_id] for node_id in node_ids]
            js = {n: connected[n].jetstream() for n in node_ids}
            self.agents.append(AgentFleet(js, ns, config, nodes))
            for node_id in node_ids:
                await self.answer_commands(connected[node_id], ns, node_id)
        for agents in self.agents:
            agents.start()

    async def stop(self) -> None:
        """Stop agents, then the scheduler, then the BMCs (idempotent)."""
        for agents in self.agents:
            await agents.stop()
        self.agents = []
        ncs, self._agent_ncs = self._agent_ncs, []
        for agent_nc in ncs:
            with contextlib.suppress(Exception):
                await agent_nc.close()
        if self._nc is not None:
            nc, self._nc = self._nc, None
            try:
                await nc.drain()
            except Exception as exc:  # noqa: BLE001 - stopping must go on whatever NATS says
                log.warning("closing the agents' NATS connection: %s", exc)
        executors, self._executors = self._executors, []
        for executor in executors:  # their connections are closed: no command comes in
            executor.close()
        if self._temporary is not None:
            shutil.rmtree(self._temporary, ignore_errors=True)
            self.commands_dir = self._temporary = None
        if self._scheduler_runner is not None:
            runner, self._scheduler_runner = self._scheduler_runner, None
            await runner.cleanup()
        await self.simulator.stop()
