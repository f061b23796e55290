"""Logging, Prometheus metrics and the health/metrics HTTP endpoint of a service.

Each service owns its ``CollectorRegistry`` (never the global one), so several services can run
in one process, as tests do, without colliding metric names.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from datetime import UTC, datetime

from aiohttp import web
from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest


class Metrics:
    """The metrics the shared runtime records; services add their own to ``registry``."""

    def __init__(self, service: str) -> None:
        self.registry = CollectorRegistry()
        self.service = service
        r = self.registry
        # The process's own: CPU seconds, resident memory, open file descriptors, start time
        # (process_*, from /proc), the interpreter and its garbage collector (python_*), as
        # prometheus_client's default registry has them; one process, one service each.
        for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
            r.register(collector)
        self.messages = Counter(
            "lockstep_messages_total",
            "Messages handled by consumers, by outcome",
            ["consumer", "outcome"],
            registry=r,
        )
        self.batch_seconds = Histogram(
            "lockstep_consumer_batch_seconds",
            "Time to process one pulled batch",
            ["consumer"],
            registry=r,
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )
        self.dead_letters = Counter(
            "lockstep_dead_letters_total",
            "Messages dead-lettered, by consumer and error kind",
            ["consumer", "error_kind"],
            registry=r,
        )
        self.outbox_published = Counter(
            "lockstep_outbox_published_total", "Outbox rows published", registry=r
        )
        self.outbox_publish_errors = Counter(
            "lockstep_outbox_publish_errors_total", "Outbox publishes that failed", registry=r
        )
        # PubAck duplicate=true: the server dropped a copy by its Nats-Msg-Id (a relay retry
        # after a crash between publish and mark, or a publish retried across a failover).
        self.outbox_duplicates = Counter(
            "lockstep_outbox_duplicates_total",
            "Outbox publishes JetStream acknowledged as duplicates (not stored again)",
            registry=r,
        )
        # MaxAckPending reached means the server silently stops delivering (no error, no
        # advisory: reliability.md 1.2), so the consumers' counts are read and exported.
        self.consumer_ack_pending = Gauge(
            "lockstep_consumer_ack_pending",
            "Messages delivered to the consumer and not yet acknowledged (JetStream's count)",
            ["consumer"],
            registry=r,
        )
        self.consumer_max_ack_pending = Gauge(
            "lockstep_consumer_max_ack_pending",
            "The consumer's MaxAckPending: at this many, delivery stops",
            ["consumer"],
            registry=r,
        )
        self.consumer_pending = Gauge(
            "lockstep_consumer_pending",
            "Messages of the consumer's subjects not yet delivered to it",
            ["consumer"],
            registry=r,
        )
        self.consumer_stalled = Gauge(
            "lockstep_consumer_stalled",
            "1 while the consumer holds MaxAckPending unacknowledged messages with more waiting",
            ["consumer"],
            registry=r,
        )
        self.ready = Gauge("lockstep_ready", "1 when the service is ready", registry=r)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, and any ``extra`` fields."""

    _STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}

    def format(self, record: logging.LogRecord) -> str:
        """Render ``record`` as JSON."""
        out: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        out.update((k, v) for k, v in record.__dict__.items() if k not in self._STANDARD)
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def configure_logging(level: str, *, json_lines: bool, service: str) -> None:
    """Route the root logger to stderr, as JSON lines or plain text."""
    handler = logging.StreamHandler(sys.stderr)
    if json_lines:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(
            logging.Formatter(f"%(asctime)s {service} %(levelname)s %(name)s: %(message)s")
        )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    logging.getLogger("nats").setLevel(max(logging.WARNING, root.level))


class HttpEndpoint:
    """``/metrics``, ``/healthz`` (the process is alive) and ``/readyz`` (dependencies are up)."""

    def __init__(self, metrics: Metrics, readiness: Callable[[], dict[str, bool]]) -> None:
        self._metrics = metrics
        self._readiness = readiness
        self._runner: web.AppRunner | None = None
        self.port: int | None = None

    async def start(self, host: str, port: int) -> int:
        """Serve on ``host:port`` (0: any free port); returns the bound port."""
        app = web.Application()
        app.router.add_get("/metrics", self._metrics_view)
        app.router.add_get("/healthz", self._health_view)
        app.router.add_get("/readyz", self._ready_view)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        self.port = int(sockets[0].getsockname()[1]) if sockets else port
        return self.port

    async def stop(self) -> None:
        """Stop serving."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _metrics_view(self, _: web.Request) -> web.Response:
        body = generate_latest(self._metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _health_view(self, _: web.Request) -> web.Response:
        return web.json_response({"status": "alive", "service": self._metrics.service})

    async def _ready_view(self, _: web.Request) -> web.Response:
        checks = self._readiness()
        ready = all(checks.values())
        return web.json_response(
            {"ready": ready, "checks": checks, "service": self._metrics.service},
            status=200 if ready else 503,
        )
