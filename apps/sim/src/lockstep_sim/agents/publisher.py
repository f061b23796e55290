"""``AgentFleet``: N simulated node agents publishing inventory and health to JetStream.

Each report cycle measures, for every node, one ``telemetry.observed.inventory.<site>.<node>``
and one ``telemetry.observed.health.<site>.<node>`` event into a bounded local buffer, then
publishes the buffer to JetStream, with the event id as ``Nats-Msg-Id``. A report leaves the
buffer only once JetStream acknowledged it; while NATS (or the TELEMETRY stream's leader) is
unavailable the reports wait and are retried with a jittered, doubling backoff, so an outage
delays them instead of losing them. A retry of a report that was in fact stored is dropped by
the stream's duplicate window (``StreamPolicy.duplicate_window_s``, 10 minutes by default;
after a longer outage a retry may be stored twice: telemetry tolerates that). When the buffer
is full the oldest report is dropped and counted (``FleetStats.dropped``): telemetry is worth
less the older it gets, and an agent must not grow without bound.

Publishes are pipelined with nats-py ``publish_async`` and bounded by a semaphore, so 12,500
nodes at a 10 s cadence need ~2,500 msg/s, which one process sustains with room to spare.

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
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import nats.errors
from nats.js import JetStreamContext
from nats.js.api import PubAck

from lockstep_common import subjects
from lockstep_common.envelope import MSG_ID_HEADER, EventData, make_envelope
from lockstep_common.subjects import Namespace
from lockstep_sim.agents.reports import agent_source, health_event, inventory_event
from lockstep_sim.agents.software import NodeSoftware

log = logging.getLogger(__name__)
_NATS_ERRORS = (nats.errors.Error, OSError, asyncio.TimeoutError)


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


@dataclass(slots=True)
class _Report:
    """One message in the buffer, sent as is (same payload, same Msg-Id) on every retry."""

    subject: str
    payload: bytes
    msg_id: str
    health: bool
    node: str
    attempts: int = 0


@dataclass(slots=True)
class _Cycle:
    pending: set[asyncio.Future[PubAck]] = field(default_factory=set)
    acked: int = 0
    failed: int = 0


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
        self.sequences: dict[str, int] = dict.fromkeys(self.nodes, 0)
        self.stats = FleetStats()
        self._subjects = {
            node: (
                namespace.wire(subjects.inventory_observed(config.site, node)),
                namespace.wire(subjects.health_observed(config.site, node)),
            )
            for node in self.nodes
        }
        self._buffer: OrderedDict[str, _Report] = OrderedDict()
        self.buffer_limit = config.buffer_cycles * 2 * max(1, len(self.nodes))
        self._slots = asyncio.Semaphore(config.max_in_flight)
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._rng = random.Random(config.seed)  # noqa: S311 - backoff jitter only

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
        return len(self._buffer)

    async def _run(self) -> None:
        backoff = self.config.backoff_initial_s
        next_sample = time.monotonic()
        retry_at = 0.0
        while not self._stopping.is_set():
            if time.monotonic() >= next_sample:
                self.sample_cycle()
                next_sample += self.config.period_s
            if self._buffer and time.monotonic() >= retry_at:
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
            wake = next_sample if not self._buffer else min(next_sample, retry_at)
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
        """Measure one inventory and one health report of every node into the buffer."""
        site = self.config.site
        for node_id, node in self.nodes.items():
            now = datetime.now(UTC)
            seq = self.sequences[node_id] = self.sequences[node_id] + 1
            inv_subject, health_subject = self._subjects[node_id]
            inventory = inventory_event(node_id, site, node.state, seq, now)
            self._enqueue(inv_subject, inventory, node_id, health=False)
            health = health_event(node_id, site, node.sample_health(), now)
            self._enqueue(health_subject, health, node_id, health=True)

    def _enqueue(self, subject: str, data: EventData, node_id: str, *, health: bool) -> None:
        env = make_envelope(data, source=agent_source(node_id), subject=node_id)
        while len(self._buffer) >= self.buffer_limit:
            self._buffer.popitem(last=False)  # the oldest report is worth the least
            self.stats.dropped += 1
        msg_id = str(env.event_id)
        self._buffer[msg_id] = _Report(subject, env.to_json(), msg_id, health, node_id)

    async def publish_buffer(self) -> bool:
        """Publish every buffered report, oldest first, and wait for the acks.

        Returns:
            True when every report was acknowledged (the buffer is empty), False after a NATS
            error or ack timeout: the publish stops at the first error and the unacknowledged
            reports stay buffered for the next try.
        """
        started = time.monotonic()
        cycle = _Cycle()
        ok = True
        for report in list(self._buffer.values()):
            if self._stopping.is_set():
                break
            try:
                await self._publish(cycle, report)
            except _NATS_ERRORS as exc:
                log.warning("publish failed, backing off: %s", exc)
                self.stats.errors += 1
                ok = False
                break
        ok = await self._settle(cycle) and ok
        elapsed = time.monotonic() - started
        self.stats.last_cycle_s = elapsed
        self.stats.busy_s += elapsed
        if not ok:
            self.stats.failed_cycles += 1
        elif not self._stopping.is_set():
            self.stats.cycles += 1
        return ok and not self._buffer

    async def _publish(self, cycle: _Cycle, report: _Report) -> None:
        await self._acquire_slot()
        try:
            js = self._js[report.node] if isinstance(self._js, Mapping) else self._js
            fut = await js.publish_async(
                report.subject, report.payload, headers={MSG_ID_HEADER: report.msg_id}
            )
        except BaseException:
            self._slots.release()
            raise
        if report.attempts:
            self.stats.retried += 1
        report.attempts += 1
        cycle.pending.add(fut)
        fut.add_done_callback(lambda f: self._done(cycle, f, report))

    async def _acquire_slot(self) -> None:
        """Take an in-flight slot; raise TimeoutError if acks stop coming back.

        Without the bound a server that stops acknowledging would park the loop here forever
        (and stop() with it): the slots are only returned by acks.
        """
        if not self._slots.locked():
            await self._slots.acquire()
            return
        deadline = time.monotonic() + self.config.ack_timeout_s
        while True:
            if self._stopping.is_set() or time.monotonic() > deadline:
                raise TimeoutError("no publish acknowledgements are coming back")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._slots.acquire(), timeout=0.1)
                return

    def _done(self, cycle: _Cycle, fut: asyncio.Future[PubAck], report: _Report) -> None:
        self._slots.release()
        cycle.pending.discard(fut)
        if fut.cancelled() or fut.exception() is not None:
            cycle.failed += 1
            return
        self._buffer.pop(report.msg_id, None)
        cycle.acked += 1
        self.stats.acked += 1
        if fut.result().duplicate:
            self.stats.duplicates += 1
        if report.health:
            self.stats.reports += 1

    async def _settle(self, cycle: _Cycle) -> bool:
        """Wait (bounded) for the cycle's acks; cancel and count the ones that never came.

        A stop() while waiting cuts the wait to ``stop_grace_s`` so stopping stays prompt even
        when the server has gone quiet.
        """
        if cycle.pending:
            acks: asyncio.Future[Any] = asyncio.gather(*cycle.pending, return_exceptions=True)
            stopper: asyncio.Future[Any] = asyncio.ensure_future(self._stopping.wait())
            await asyncio.wait(
                {acks, stopper},
                timeout=self.config.ack_timeout_s,
                return_when=asyncio.FIRST_COMPLETED,
            )
            stopper.cancel()
            if cycle.pending and self._stopping.is_set():
                await asyncio.wait(set(cycle.pending), timeout=self.config.stop_grace_s)
        late = set(cycle.pending)
        for fut in late:
            fut.cancel()
        if late:
            # Let the cancel callbacks run so the in-flight slots are returned.
            await asyncio.sleep(0)
        if cycle.failed:
            self.stats.errors += cycle.failed
            log.warning("%d publishes of the cycle were not acknowledged", cycle.failed)
        return cycle.failed == 0
