"""The agent's own metrics, served on a local port (``metrics_port``) with ``/healthz`` and
``/readyz`` by the shared endpoint (``lockstep_common.observability.HttpEndpoint``): node
exporters and Prometheus scrape it like the services'."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from lockstep_agent.agent import NodeAgent
from lockstep_agent.sender import SendStats
from lockstep_common.observability import Metrics


class AgentMetrics:
    """Gauges read from the agent's spool and sender after each cycle (``update``)."""

    def __init__(self) -> None:
        self.base = Metrics("agent")
        r = self.base.registry
        self.cycles = Counter("lockstep_agent_cycles_total", "Report cycles run", registry=r)
        self.cycle_seconds = Histogram(
            "lockstep_agent_cycle_seconds",
            "Time to read the node and spool one report pair",
            registry=r,
            buckets=(0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
        )
        self.spooled = Gauge(
            "lockstep_agent_spooled_reports", "Reports waiting for JetStream's ack", registry=r
        )
        self.dropped = Gauge(
            "lockstep_agent_dropped_reports",
            "Reports dropped unsent because the spool was full, since the spool was made",
            registry=r,
        )
        self.acked = Gauge(
            "lockstep_agent_acked_reports", "Reports acknowledged since the start", registry=r
        )
        self.errors = Gauge(
            "lockstep_agent_publish_errors",
            "Publishes that raised or were not acknowledged since the start",
            registry=r,
        )
        self.nvml_up = Gauge(
            "lockstep_agent_nvml_up", "1 when NVML answered the last reading", registry=r
        )
        self.gpus = Gauge("lockstep_agent_gpus", "GPUs NVML listed at the last reading", registry=r)
        self.connected = Gauge(
            "lockstep_agent_nats_connected", "1 while connected to NATS", registry=r
        )

    def update(self, agent: NodeAgent, sent: SendStats, *, connected: bool) -> None:
        """Read the current figures."""
        self.spooled.set(len(agent.spool))
        self.dropped.set(agent.spool.dropped)
        self.acked.set(sent.acked)
        self.errors.set(sent.errors)
        self.connected.set(1 if connected else 0)
