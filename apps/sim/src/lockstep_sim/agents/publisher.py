"""``AgentFleet``: N simulated nodes, each running the node agent's code (``lockstep_agent``)
with simulated probes, publishing inventory and health to JetStream.

Each simulated node is a ``lockstep_agent.agent.NodeAgent`` whose reading comes from the node's
model (``software.NodeSoftware``: ``SimReading``) instead of the machine's probes, and whose
buffer is a ``MemorySpool``; the whole fleet's buffers are published by one
``lockstep_agent.sender.Sender``, the real agent's publisher. So the cycle (sequence, events,
envelope, ``Nats-Msg-Id``), the buffering (bounded, oldest dropped and counted) and the
publishing (kept until JetStream acknowledged it, retried with the same id, pipelined and
bounded, prompt to stop) are the real agent's, not a second implementation.

Each report cycle measures, for every node, one ``telemetry.observed.inventory.<site>.<node>``
and one ``telemetry.observed.health.<site>.<node>`` event into its buffer, then publishes the
buffers. While NATS (or the TELEMETRY stream's leader) is unavailable the reports wait and are
retried with a jittered, doubling backoff, so an outage delays them instead of losing them. A
retry of a report that was in fact stored is dropped by the stream's duplicate window
(``StreamPolicy.duplicate_window_s``, 10 minutes by default; after a longer outage a retry may
be stored twice: telemetry tolerates that). When a node's buffer is full its oldest report is
dropped and counted (``FleetStats.dropped``).

Publishes are pipelined and bounded (``max_in_flight``), so 12,500 nodes at a 10 s cadence
need ~2,500 msg/s, which one process sustains with room to spare.

Each node publishes on its own connection when given one (``js`` a mapping node -> JetStream
context): a node agent's identity is allowed its own node's subjects only (issue 26), so the
simulated fleet connects as many identities as it has nodes, as real agents would. One shared
context remains for an open development server.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from nats.js import JetStreamContext

from lockstep_agent.agent import NodeAgent
from lockstep_agent.probes.xid import Cursor
from lockstep_agent.sender import Queued, Sender
from lockstep_agent.spool import MemorySpool
from lockstep_common import subjects
from lockstep_common.events.v1 import HealthObserved, InventoryObserved
from lockstep_common.subjects import Namespace
from lockstep_sim.agents.reports import health_event, inventory_event
from lockstep_sim.agents.software import HealthSample, NodeSoftware, SoftwareState

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class FleetConfig:
    """How the fleet reports.

    Attributes:
        site: site id of every node (a subject token).
        nodes: how many nodes to simulate (ids ``<node_prefix>-00000`` ...).
        cadence_s: simulated seconds between two reports of a node.
        time_scale: simulated seconds per real second; the real period is cadence/time_scale.
        seed: fleet seed; per-node state is derived from (seed, node id).
        driver_version: driver every node starts on.
        max_in_flight: most unacknowledged publishes at once.
        ack_timeout_s: how long to wait for a cycle's acks before counting them as failed.
        backoff_initial_s: first pause after a NATS error; doubles up to ``backoff_max_s``.
        backoff_max_s: longest pause after repeated NATS errors.
        stop_grace_s: how long stop() waits for the in-flight acks of the cycle.
        node_prefix: prefix of generated node ids.
        buffer_cycles: how many cycles' reports the local buffer holds while NATS is away
            (30 cycles: 5 minutes at a 10 s cadence); beyond it the oldest are dropped.
    """

    site: str = "site-a"
    nodes: int = 16
    cadence_s: float = 10.0
    time_scale: float = 1.0
    seed: int = 0
    driver_version: str = "580.65.06"
    max_in_flight: int = 2048
    ack_timeout_s: float = 10.0
    backoff_initial_s: float = 0.2
    backoff_max_s: float = 10.0
    stop_grace_s: float = 1.0
    node_prefix: str = "node"
    buffer_cycles: int = 30

    def __post_init__(self) -> None:
        positive = ("cadence_s", "time_scale", "max_in_flight", "ack_timeout_s", "buffer_cycles")
        for name in positive:
            if getattr(self, name) <= 0:
                raise ValueError(f"FleetConfig.{name} must be > 0, got {getattr(self, name)!r}")
        subjects.token(self.site, "site")

    @property
    def period_s(self) -> float:
        """Real seconds between two cycles."""
        return self.cadence_s / self.time_scale


@dataclass(slots=True)
class FleetStats:
    """Counters since the fleet started (read them; do not write)."""

    cycles: int = 0
    """Publishes of the buffer in which every report was acknowledged."""
    reports: int = 0
    """Health reports acknowledged (each node sends one with its inventory every cycle)."""
    acked: int = 0
    duplicates: int = 0
    """Acknowledged as already stored (a retry the duplicate window dropped)."""
    errors: int = 0
    """Publishes that raised or were not acknowledged."""
    failed_cycles: int = 0
    """Publishes of the buffer cut short or left unacknowledged by a NATS error (each one is
    backed off; the reports stay buffered)."""
    retried: int = 0
    """Publishes of a report sent before and not acknowledged then."""
    dropped: int = 0
    """Reports dropped unsent, oldest first, because the buffer was full."""
    overruns: int = 0
    """Cycles that took longer than the period (the fleet is not keeping up)."""
    last_cycle_s: float = 0.0
    busy_s: float = 0.0
    """Total real time spent publishing (for reports/s)."""

    def reports_per_s(self) -> float:
        """Reports acknowledged per second of publishing time."""
        return self.reports / self.busy_s if self.busy_s else 0.0


@dataclass(frozen=True, slots=True)
class SimReading:
    """A simulated node's reading: its model's state and health sample in place of the probes'
    facts (``lockstep_agent.agent.Reading``). The heartbeat is the model's report counter, so a
    scenario that restarts a node's agent shows as a reset, as a real restart would."""

    state: SoftwareState
    sample: HealthSample

    @property
    def xid_cursor(self) -> Cursor | None:
        return None  # the model's XIDs are its own sample's, no kernel log

    def inventory(self, node: str, site: str, sequence: int, now: datetime) -> InventoryObserved:
        return inventory_event(node, site, self.state, sequence, now)

    def health(self, node: str, site: str, heartbeat: int, now: datetime) -> HealthObserved:
        return health_event(node, site, self.sample, now)


def _reader(node: NodeSoftware) -> Callable[[Cursor | None], SimReading]:
    def read(_cursor: Cursor | None) -> SimReading:
        return SimReading(node.state, node.sample_health())

    return read


class AgentFleet:
    """Publishes every node's reports once per period until stopped.

    Args:
        js: JetStream context to publish with, or one per node (each node's agent connected
            as its own identity).
        namespace: deployment namespace (prefixes every subject).
        config: fleet settings.
        nodes: explicit node models (default: ``config.nodes`` fresh ones); kept by reference,
            so tests can flip fault knobs or install drivers while the fleet runs.
    """

    def __init__(
        self,
        js: JetStreamContext | Mapping[str, JetStreamContext],
        namespace: Namespace,
        config: FleetConfig,
        nodes: Iterable[NodeSoftware] | None = None,
    ) -> None:
        self._js = js
        self._ns = namespace
        self.config = config
        if nodes is None:
            nodes = (
                NodeSoftware(f"{config.node_prefix}-{i:05d}", config.seed, config.driver_version)
                for i in range(config.nodes)
            )
        self.nodes: dict[str, NodeSoftware] = {n.node_id: n for n in nodes}
        # Each node runs the agent's cycle with its model as the probes and an in-memory
        # buffer of ``buffer_cycles`` cycles' reports.
        self.agents: dict[str, NodeAgent] = {
            node_id: NodeAgent(
                node_id,
                config.site,
                namespace,
                _reader(node),
                MemorySpool(config.buffer_cycles * 2),
            )
            for node_id, node in self.nodes.items()
        }
        self._health_subjects = {
            namespace.wire(subjects.health_observed(config.site, n)) for n in self.nodes
        }
        self.stats = FleetStats()
        self._stopping = asyncio.Event()
        self.sender = Sender(
            max_in_flight=config.max_in_flight,
            ack_timeout_s=config.ack_timeout_s,
            stop_grace_s=config.stop_grace_s,
            stopping=self._stopping,
        )
        self._task: asyncio.Task[None] | None = None
        self._rng = random.Random(config.seed)  # noqa: S311 - backoff jitter only

    @property
    def sequences(self) -> dict[str, int]:
        """Each node's last inventory sequence measured."""
        return {node: agent.sequence for node, agent in self.agents.items()}

    @property
    def buffer_limit(self) -> int:
        """Most reports the fleet's buffers hold together."""
        return sum(a.spool.limit for a in self.agents.values())

    def start(self) -> None:
        """Start reporting in the background (idempotent)."""
        if self._task is None or self._task.done():
            self._stopping.clear()
            self._task = asyncio.create_task(self._run(), name="agent-fleet")

    async def stop(self) -> None:
        """Stop within about ``stop_grace_s`` (in-flight acks get that long); never raises."""
        self._stopping.set()
        if self._task is not None:
            with contextlib.suppress(Exception):
                await self._task
            self._task = None

    @property
    def buffered(self) -> int:
        """Reports waiting for an acknowledgement."""
        return sum(len(a.spool) for a in self.agents.values())

    async def _run(self) -> None:
        backoff = self.config.backoff_initial_s
        next_sample = time.monotonic()
        retry_at = 0.0
        while not self._stopping.is_set():
            if time.monotonic() >= next_sample:
                self.sample_cycle()
                next_sample += self.config.period_s
            if self.buffered and time.monotonic() >= retry_at:
                if await self.publish_buffer():
                    backoff = self.config.backoff_initial_s
                else:
                    # Back off on NATS errors with jitter instead of retrying in a tight loop;
                    # reports go on being measured (and buffered) at the cadence meanwhile.
                    retry_at = time.monotonic() + backoff * self._rng.uniform(0.5, 1.0)
                    backoff = min(backoff * 2, self.config.backoff_max_s)
            if self._stopping.is_set():
                return
            if next_sample < time.monotonic():
                self.stats.overruns += 1
                next_sample = time.monotonic()
            wake = next_sample if not self.buffered else min(next_sample, retry_at)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._stopping.wait(), timeout=max(wake - time.monotonic(), 0.0)
                )

    async def publish_cycle(self) -> bool:
        """Measure one report of every node and publish the buffer (``sample_cycle`` then
        ``publish_buffer``)."""
        self.sample_cycle()
        return await self.publish_buffer()

    def sample_cycle(self) -> None:
        """Measure one inventory and one health report of every node into its buffer."""
        for agent in self.agents.values():
            agent.cycle()
        self.stats.dropped = sum(a.spool.dropped for a in self.agents.values())

    def _js_of(self, node: str) -> JetStreamContext:
        return self._js[node] if isinstance(self._js, Mapping) else self._js

    async def publish_buffer(self) -> bool:
        """Publish every buffered report, each node's oldest first, and wait for the acks.

        Returns:
            True when every report was acknowledged (the buffers are empty), False after a NATS
            error or ack timeout: the publish stops at the first error and the unacknowledged
            reports stay buffered for the next try.
        """
        started = time.monotonic()
        queued = [
            Queued(agent.spool, report, self._js_of(node))
            for node, agent in self.agents.items()
            for report in agent.spool.pending()
        ]
        ok, acked = await self.sender.send(queued)
        elapsed = time.monotonic() - started
        sent = self.sender.stats
        st = self.stats
        st.reports += sum(q.report.subject in self._health_subjects for q in acked)
        st.acked, st.duplicates, st.errors, st.retried = (
            sent.acked,
            sent.duplicates,
            sent.errors,
            sent.retried,
        )
        st.failed_cycles = sent.failed_passes
        st.last_cycle_s = elapsed
        st.busy_s += elapsed
        if ok and not self._stopping.is_set():
            st.cycles += 1
        return ok and not self.buffered
