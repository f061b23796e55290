"""``lockstep-agent run``: probe, spool and publish every ``cadence_s`` until stopped, and
answer the updater's in-band commands (``command_channel``).

The agent measures and spools whether or not NATS is there: it connects in the background
(nats-py retries the first connection and every reconnection by itself, ``max_reconnect_attempts
=-1``), drains the spool on every cycle and as soon as the connection is back. What no retry
can fix ends the agent with one line (``AgentStopped``): the server's certificate not signed by
the configured CA, the server refusing the node's key (not enrolled, revoked), or refusing its
reports (another node's key).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import ssl

from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext

from lockstep_agent.agent import NodeAgent, ProbedReading
from lockstep_agent.command_channel import CommandChannel
from lockstep_agent.commands import COMMAND_JOURNAL, Executor, Host
from lockstep_agent.config import AgentConfig
from lockstep_agent.metrics import AgentMetrics
from lockstep_agent.probes.diagnostics import DiagnosticFiles
from lockstep_agent.probes.node import probe_node
from lockstep_agent.probes.xid import KMSG, Cursor, KernelLog
from lockstep_agent.reading import read_node
from lockstep_agent.reports import Counters
from lockstep_agent.sender import Sender, drain
from lockstep_agent.spool import Spool
from lockstep_common import natsconn
from lockstep_common.observability import HttpEndpoint
from lockstep_common.subjects import Namespace

log = logging.getLogger(__name__)
SPOOL_FILE = "spool.sqlite"
CONNECT_TIMEOUT_S = 2.0
DRAIN_BATCH = 256
XID_MIN_GAP_S = 0.25
"""Least time between two cycles woken early by XIDs."""


class AgentStopped(RuntimeError):
    """The agent cannot go on: one line saying why (it exits non-zero)."""


def fatal_reason(exc: BaseException, config: AgentConfig) -> str | None:
    """Why ``exc`` ends the agent, or None when a retry may succeed."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return (
            f"the NATS server's certificate is not trusted by CA file {config.ca_file}: "
            f"{exc.verify_message}"
        )
    if "authorization violation" in str(exc).lower():
        return (
            f"the NATS server refused {config.identity}'s key (not enrolled, revoked, or "
            f"another node's key in {config.nkey_file})"
        )
    if "permissions violation for publish" in str(exc).lower():
        # nkey users are known by their key alone: another node's seed logs in as that node,
        # and the server then refuses this node's subjects.
        return (
            f"the NATS server does not let this key publish {config.identity}'s reports (is "
            f"{config.nkey_file} another node's key?): {exc}"
        )
    return None


class Runner:
    """The running agent: its spool, its connection and its cycle."""

    def __init__(self, config: AgentConfig, host: Host | None = None) -> None:
        self.config = config
        # Read now, so an unreadable or exposed credential is one line before anything starts.
        self._options = config.access().options()
        self.spool = Spool(config.data_dir / SPOOL_FILE, config.spool_limit)
        root, counters = config.root, Counters()

        self.metrics = AgentMetrics()
        self.endpoint = HttpEndpoint(self.metrics.base, self._readiness)

        self.kernel_log = KernelLog(root / KMSG)
        diagnostics = DiagnosticFiles(
            dcgm=config.dcgm_result,
            dcgm_level=config.dcgm_level,
            nccl=config.nccl_result,
            nccl_expected_gbps=config.nccl_expected_gbps,
            max_age_s=config.diagnostics_max_age_s,
        )

        def read(cursor: Cursor | None) -> ProbedReading:
            facts = probe_node(root, cursor, kernel_log=self.kernel_log, diagnostics=diagnostics)
            reading = ProbedReading(facts, counters)
            self.metrics.nvml_up.set(1 if reading.facts.nvml.available else 0)
            self.metrics.gpus.set(len(reading.facts.nvml.gpus))
            return reading

        self.agent = NodeAgent(
            config.node, config.site, Namespace(config.namespace), read, self.spool
        )
        # The updater's in-band commands (node.command), answered once connected.
        self.executor = Executor(
            config.data_dir / COMMAND_JOURNAL, host, reader=functools.partial(read_node, root)
        )
        self.commands = CommandChannel(
            self.executor, Namespace(config.namespace), config.site, config.node
        )
        self.stop = asyncio.Event()
        self.sender = Sender(stopping=self.stop)
        self._wake = asyncio.Event()
        self._xid = asyncio.Event()
        """An XID was logged since the last cycle."""
        self._fatal: str | None = None
        self.nc: NatsClient | None = None
        self.js: JetStreamContext | None = None

    async def _on_error(self, exc: Exception) -> None:
        reason = fatal_reason(exc, self.config)
        if reason is not None:
            self._fatal = reason
            self.stop.set()
        else:
            log.warning("nats: %s", exc)

    async def _on_connected(self) -> None:
        log.info("connected to NATS as %s", self.config.identity)
        self._wake.set()

    async def _connect(self) -> None:
        import nats

        self.nc = await nats.connect(
            name=self.config.identity,
            **self._options,
            connect_timeout=CONNECT_TIMEOUT_S,
            allow_reconnect=True,
            max_reconnect_attempts=-1,
            reconnect_time_wait=1.0,
            ping_interval=natsconn.PING_INTERVAL_S,
            max_outstanding_pings=natsconn.MAX_OUTSTANDING_PINGS,
            error_cb=self._on_error,
            reconnected_cb=self._on_connected,
        )
        # One context: its publish_async reply subscription is made once, not per drain.
        self.js = self.nc.jetstream()
        # nats-py subscribes again by itself after each reconnection.
        await self.commands.subscribe(self.nc)
        await self._on_connected()

    async def run(self) -> None:
        """Report until ``stop`` is set (a signal) or a fatal error.

        Raises:
            AgentStopped: the server cannot be trusted or refuses the node's key.
        """
        log.info(
            "lockstep-agent for node %s (site %s) starting", self.config.node, self.config.site
        )
        endpoint = self.endpoint
        if self.config.metrics_port is not None:
            port = await endpoint.start(self.config.metrics_host, self.config.metrics_port)
            log.info("metrics on http://%s:%d/metrics", self.config.metrics_host, port)
        connecting = asyncio.create_task(self._connect(), name="connect")
        loop = asyncio.get_running_loop()
        watched = self._watch_kernel_log(loop)
        next_at = loop.time()
        last_at = -XID_MIN_GAP_S
        try:
            while not self.stop.is_set():
                now = loop.time()
                # An XID is reported at once (the gate trips on it), not at the next cycle;
                # an XID storm still costs at most one cycle per XID_MIN_GAP_S.
                early = self._xid.is_set() and now >= last_at + XID_MIN_GAP_S
                if now >= next_at or early:
                    self._xid.clear()
                    last_at = now
                    with self.metrics.cycle_seconds.time():
                        await asyncio.to_thread(self.agent.cycle)
                    self.metrics.cycles.inc()
                    if not early:
                        # The next cycle one period later; after an overrun, one from now.
                        next_at = max(next_at + self.config.cadence_s, loop.time())
                self._wake.clear()
                await self._drain()
                self.metrics.update(self.agent, self.sender.stats, connected=self._connected())
                wake_at = next_at
                if self._xid.is_set():
                    wake_at = min(wake_at, last_at + XID_MIN_GAP_S)
                waits = {
                    asyncio.ensure_future(self.stop.wait()),
                    asyncio.ensure_future(self._wake.wait()),
                }
                _, pending = await asyncio.wait(
                    waits,
                    timeout=max(wake_at - loop.time(), 0.0),
                    return_when=asyncio.FIRST_COMPLETED,
                )
                for w in pending:
                    w.cancel()
        finally:
            if watched is not None:
                loop.remove_reader(watched)  # False when a read error removed it already
            await endpoint.stop()
            connecting.cancel()
            with contextlib.suppress(BaseException):
                await connecting
            if self.nc is not None:
                with contextlib.suppress(Exception):
                    await self.nc.close()
            self.spool.close()
            self.kernel_log.close()
            self.executor.close()
        if self._fatal is not None:
            raise AgentStopped(self._fatal)

    def _watch_kernel_log(self, loop: asyncio.AbstractEventLoop) -> int | None:
        """Be woken when the followed kernel log logs an XID (None: it cannot be watched)."""
        fd = self.kernel_log.follow()
        if fd is None:
            return None
        try:
            loop.add_reader(fd, self._on_kernel_log, loop, fd)
        except (OSError, ValueError, NotImplementedError) as exc:
            log.warning("kernel log %s cannot be watched: %s", self.kernel_log.path, exc)
            return None
        return fd

    def _on_kernel_log(self, loop: asyncio.AbstractEventLoop, fd: int) -> None:
        try:
            xid = self.kernel_log.watch()
        except OSError as exc:
            # Not watched any more (it would wake us in a loop); the cycle still reads it.
            log.warning("kernel log %s: %s; XIDs wait for the next cycle", fd, exc)
            loop.remove_reader(fd)
            return
        if xid:
            self._xid.set()
            self._wake.set()

    def _connected(self) -> bool:
        return self.nc is not None and self.nc.is_connected

    def _readiness(self) -> dict[str, bool]:
        return {"nats": self._connected()}

    async def _drain(self) -> None:
        if self.nc is not None and self.js is not None and self.nc.is_connected:
            await drain(self.sender, self.spool, self.js, DRAIN_BATCH)
