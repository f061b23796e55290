"""The updater's executor against the simulator (BMCs + scheduler API), on the in-memory
store, with the inventory's answers given directly: everything but PostgreSQL. The node agents'
in-band commands (``agent_bus``) travel over a real nats-server with the generated permissions,
each simulated node answering as its own enrolled identity through the agent's own code."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client as NatsClient

from lockstep_cli.catalog import bus_permissions
from lockstep_common import natsconn
from lockstep_common.envelope import source_of
from lockstep_common.events.v1 import AttestedComponent
from lockstep_common.identities import agent_identity
from lockstep_common.provenance import UPDATER
from lockstep_common.subjects import Namespace
from lockstep_common.vocabulary import Component
from lockstep_devstack import agents
from lockstep_devstack.nats import NatsServer
from lockstep_devstack.process import free_port
from lockstep_redfish import RetryPolicy
from lockstep_redfish.tasks import TaskPolicy
from lockstep_redfish.update import UpdatePolicy
from lockstep_sim.options import DEFAULT_PASSWORD, OPERATOR_USERNAME, SimOptions
from lockstep_sim.runtime import FleetRuntime
from lockstep_updater.adapters.agent_commands import NatsAgentCommands
from lockstep_updater.adapters.node_agent_nats import NatsNodeAgent
from lockstep_updater.executor import Executor, ExecutorPolicy
from lockstep_updater.testing.memory_store import MemoryStore
from lockstep_updater.testing.sim_fleet import SimFacts, sim_executor
from tests.integration.sim.pldm_fixtures import GB200_GPU, NEW_GPU_VERSION, package_for
from tests.integration.updater.slurm_cluster import SlurmCluster, missing

STACK = "b" * 64
ROLLOUT = "r-7"
PUSH = "update-multipart"  # the ledger's action name for a POST to MultipartHttpPushUri
AGENT_NS = Namespace("inbandnats")
ENV = {"SIMBMC_USERNAME": OPERATOR_USERNAME, "SIMBMC_PASSWORD": DEFAULT_PASSWORD}
FAST = ExecutorPolicy(
    lease_s=60.0,
    retry_s=1.0,
    drain_poll_s=1.0,
    drain_deadline_s=3600.0,
    update=UpdatePolicy(
        tasks=TaskPolicy(
            deadline_s=10, poll_s=0.01, min_poll_s=0.005, max_poll_s=0.02, unreachable_s=5
        ),
        resend=RetryPolicy(backoff_s=0.01, max_retry_after_s=5),
        settle_s=2.0,
        reachable_s=5.0,
        read_poll_s=0.01,
    ),
    transport=RetryPolicy(timeout_s=2, retries=1, backoff_s=0.01),
)


@dataclass
class World:
    rt: FleetRuntime
    store: MemoryStore
    facts: SimFacts
    bundle: Path
    gpu: AttestedComponent
    executors: list[Executor] = field(default_factory=list)

    def executor(self, store: Any = None, *, one_step_a_claim: bool = False) -> Executor:
        """An executor on the world; ``one_step_a_claim``: each claim runs one step and lets
        the item go (as a stopping worker does), for tests that stop the node at a step."""
        ex = sim_executor(self.rt, store or self.store, self.facts, self.bundle, FAST, ENV)
        if one_step_a_claim:
            ex.chains = lambda: False
        self.executors.append(ex)
        return ex

    def pushes(self, node_id: str) -> list[dict[str, Any]]:
        """Accepted pushes in the node's BMC ledger."""
        return [
            e
            for e in self.rt.simulator.bmc(node_id).ledger
            if e["action"] == PUSH and e.get("status") == 202
        ]

    def actions(self, node_id: str, action: str) -> list[dict[str, Any]]:
        """Entries of ``action`` in the node's BMC ledger (accepted or not)."""
        return [e for e in self.rt.simulator.bmc(node_id).ledger if e["action"] == action]

    def gpu_versions(self, node_id: str) -> set[str]:
        comps = self.rt.simulator.bmc(node_id).node.components
        return {c.version for m, c in comps.items() if m.startswith("HGX_FW_GPU_")}

    async def settle(self, executor: Executor | None = None, *, rounds: int = 3000) -> None:
        """Run steps until every item reached an end; the store's clock is moved on when
        only waiting items are left (a retry or a drain poll), never the wall clock."""
        ex = executor or self.executor()
        for _ in range(rounds):
            if all(i.state.value in {"done", "cancelled", "failed", "quarantined"}
                   for i in self.store.items):  # fmt: skip
                return
            if not await ex.step():
                await ex.sweep_parked()  # as the worker does every budget_recheck_s
                self.store.advance(FAST.retry_s)
        raise AssertionError(f"not settled: {[(i.node_id, i.state) for i in self.store.items]}")


def attest_image(
    bundle: Path, name: str, image: bytes, component: Component, version: str
) -> AttestedComponent:
    """Write ``image`` into the bundle as ``images/<name>`` and describe it as ``bundle.attested``
    does (a gb200 A/B image activated by a reset)."""
    (bundle / "images").mkdir(parents=True, exist_ok=True)
    (bundle / "images" / name).write_bytes(image)
    return AttestedComponent(
        profile="gb200",
        component=component,
        version=version,
        image=f"images/{name}",
        sha384=hashlib.sha384(image).hexdigest(),
        size=len(image),
        banks="ab",
        activation="reset",
    )


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    bundle = tmp_path / "bundle"
    image = package_for(GB200_GPU, NEW_GPU_VERSION)
    gpu = attest_image(bundle, "gpu.fwpkg", image, Component.GPU_VBIOS, NEW_GPU_VERSION)
    rt = FleetRuntime(
        SimOptions(4, "gb200", time_scale=0.002, host_base="127.74.0.1", port=0),
        scheduler_port=0,
    )
    await rt.start()
    store = MemoryStore()
    async with store.transaction() as tx:
        await tx.record_bundle(STACK, str(bundle), (gpu,))
    w = World(rt, store, SimFacts(rt, credentials="SIMBMC"), bundle, gpu)
    try:
        yield w
    finally:
        for ex in w.executors:  # the BMC sessions of nodes left mid-update
            await ex.close()
        rt.simulator.set_faults(None)
        await rt.stop()


SLURM_NODES = ("node-00000", "node-00001", "node-00002")
"""The Slurm cluster's nodes: named as the simulated fleet's first nodes, so one node id means
the same machine to the BMC simulator and to Slurm."""


@pytest.fixture(scope="session")
def slurm_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    absent = missing()
    if absent:
        pytest.skip(
            f"Slurm is not installed here: {', '.join(absent)} found neither on PATH nor "
            "in /usr/sbin (apt-get install slurm-wlm munge)"
        )
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"), SLURM_NODES)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def slurm(slurm_session: SlurmCluster) -> Iterator[SlurmCluster]:
    """The private Slurm cluster, every node idle and no job of an earlier test left."""
    yield slurm_session
    slurm_session.reset()


@pytest.fixture(scope="session")
def agent_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    """A nats-server with the generated permissions and the world's four nodes enrolled
    (``lockstep agent enroll``: one nkey identity each), for the whole session."""
    base = tmp_path_factory.mktemp("agent-bus")
    nodes = SimOptions(4, "gb200", host_base="127.74.0.1", port=0)
    fleet = FleetRuntime(nodes, scheduler_port=0).fleet
    agents.enroll(base, {node.id: node.site for node in fleet})
    server = NatsServer(
        base / "nats",
        port=free_port(),
        sync_always=False,
        access=bus_permissions(AGENT_NS),
        secrets_dir=base,
    )
    server.start(timeout_s=30)
    try:
        yield server
    finally:
        server.stop()


@dataclass
class AgentBus:
    """The world's node agents on ``server``, each answering its node's commands; ``agent``:
    the updater's ``NatsNodeAgent`` on the updater's own identity."""

    server: NatsServer
    agent: NatsNodeAgent
    updater: NatsClient


@pytest.fixture
async def agent_bus(world: World, agent_server: NatsServer) -> AsyncIterator[AgentBus]:
    conns: list[NatsClient] = []
    try:
        for node in world.rt.fleet:
            nc = await natsconn.connect(agent_server.client(agent_identity(node.id)), name=node.id)
            conns.append(nc)
            await world.rt.answer_commands(nc, AGENT_NS, node.id)
        updater = await natsconn.connect(agent_server.client(UPDATER), name="test-updater")
        conns.append(updater)
        commands = NatsAgentCommands(updater, AGENT_NS, source_of(UPDATER), timeout_s=30)
        yield AgentBus(agent_server, NatsNodeAgent(commands), updater)
    finally:
        for nc in conns:
            await nc.close()
