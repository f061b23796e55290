"""The service bootstrap shared by every Lockstep service.

``ServiceApp`` is built by a service's ``create_app()`` (its only composition root) and does no
I/O until ``start()``: connect to PostgreSQL and apply migrations, connect to NATS and run the
topology self-check, then start the outbox relay, the consumers, the advisory watcher, periodic
maintenance and the HTTP endpoint. ``stop()`` stops pulling, lets in-flight batches and the
current relay pass finish within ``shutdown_grace_s``, drains NATS and closes the pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import asyncpg
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext
from pydantic import ValidationError

from lockstep_common import db, deadletter, inbox, natsconn, operator
from lockstep_common.advisories import AdvisoryWatcher, watcher_spec
from lockstep_common.consumer import ConsumerRunner, RunnerConfig, Subscription, consumer_spec
from lockstep_common.consumer_watch import ConsumerWatch, Watched
from lockstep_common.dlq_commands import DLQ_COMMANDS
from lockstep_common.envelope import EventRegistry, source_of
from lockstep_common.errors import ConfigurationError, describe
from lockstep_common.events import REGISTRY
from lockstep_common.observability import HttpEndpoint, Metrics, configure_logging
from lockstep_common.operator import Command, OperatorResponder
from lockstep_common.periodic import Every
from lockstep_common.query_gauges import RUNTIME_GAUGES, QueryGauges
from lockstep_common.relay import OutboxRelay, RelayConfig
from lockstep_common.settings import ServiceSettings, explain, unknown_variables
from lockstep_common.subjects import Namespace
from lockstep_common.topology import ConsumerSpec, ensure_topology

log = logging.getLogger(__name__)


class Worker(Protocol):
    """A service's own background loop (e.g. a job runner), started after its connections."""

    async def run(self, resources: Resources, stopping: asyncio.Event) -> None:
        """Work until ``stopping`` is set; finish the item in hand, then return."""


@dataclass(slots=True)
class Resources:
    """Live connections, present between ``start`` and ``stop``."""

    pool: asyncpg.Pool
    nc: NatsClient
    js: JetStreamContext
    http_port: int
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


async def _answering(operator: OperatorResponder, task: asyncio.Task[None]) -> None:
    """Wait until ``operator`` (run by ``task``) has subscribed, or its task ended: ready means
    answering, so an operator command sent once ``start()`` returns finds its answerer, not
    NATS's "no responders"."""
    subscribed = asyncio.ensure_future(operator.subscribed.wait())
    await asyncio.wait({subscribed, task}, return_when=asyncio.FIRST_COMPLETED)
    subscribed.cancel()


class ServiceApp:
    """One running Lockstep service.

    Args:
        name: service name; also the default schema and the durable-name prefix.
        settings: the service's validated settings.
        subscriptions: the service's consumers, from its ``router.py``.
        migration_package: the package holding its ``NNNN_name.sql`` files, if any.
        registry: event types it can decode.
        workers: its own background loops, started last and stopped first.
    """

    def __init__(
        self,
        name: str,
        settings: ServiceSettings,
        *,
        subscriptions: Sequence[Subscription] = (),
        migration_package: str | None = None,
        registry: EventRegistry = REGISTRY,
        workers: Sequence[Worker] = (),
    ) -> None:
        self.name = name
        self.settings = settings
        self.subscriptions = tuple(subscriptions)
        self.schema = settings.db_schema or name
        self.namespace = Namespace(settings.namespace)
        self.metrics = Metrics(name)
        self._migration_package = migration_package
        self._workers = (*workers, QueryGauges(self.metrics.registry, RUNTIME_GAUGES))
        if self.subscriptions:  # the MaxAckPending stall detector (consumer_watch.py)
            watched = [
                Watched(self.namespace.stream(sub.stream), self.namespace.durable(sub.name))
                for sub in self.subscriptions
            ]
            self._workers += (
                ConsumerWatch(watched, self.metrics, interval_s=settings.consumer_watch_s),
            )
        self._registry = registry
        self._runners: list[ConsumerRunner] = []
        self.relay: OutboxRelay | None = None
        self._watcher: AdvisoryWatcher | None = None
        self._http = HttpEndpoint(self.metrics, self.readiness)
        self._stopping = asyncio.Event()
        self._checks: dict[str, Callable[[], bool]] = {}
        self.resources: Resources | None = None
        # Every service answers operator commands about its dead letters; add_operator_commands
        # adds its own (lockstep_common.operator).
        self._operator_commands: list[Command[Any]] = list(DLQ_COMMANDS)

    def add_operator_commands(self, *commands: Command[Any]) -> None:
        """Operator commands this service answers (``ops.<identity>.<service>.<command>``)."""
        if self.resources is not None:
            raise RuntimeError(f"service {self.name} is already started")
        self._operator_commands += commands

    def add_workers(self, *workers: Worker) -> None:
        """Add background loops that need the app itself (its metrics, namespace, source)."""
        if self.resources is not None:
            raise RuntimeError(f"service {self.name} is already started")
        self._workers += workers

    def add_check(self, name: str, check: Callable[[], bool]) -> None:
        """A service's own readiness condition (e.g. no job held past its lease), reported in
        ``/readyz`` beside the shared ones."""
        self._checks[name] = check

    @property
    def source(self) -> str:
        """CloudEvents ``source`` of events this service emits."""
        return source_of(self.name)

    def require(self) -> Resources:
        """The live connections; raises if the service is not started."""
        if self.resources is None:
            raise RuntimeError(f"service {self.name} is not started")
        return self.resources

    def readiness(self) -> dict[str, bool]:
        """Checks behind ``/readyz``: connected, no background loop failed, and every consumer
        still pulling (one whose durable was deleted fails every pull)."""
        res = self.resources
        now = time.monotonic()
        return {
            "started": res is not None and not self._stopping.is_set(),
            "nats": res is not None and res.nc.is_connected,
            "postgres": res is not None and not res.pool.is_closing(),
            # A loop may end by design (periodic sweeps switched off); one that raised may not.
            "loops": res is not None and not any(_failed(t) for t in res.tasks),
            "consumers": res is not None and all(r.pulling(now) for r in self._runners),
            **{name: res is not None and check() for name, check in self._checks.items()},
        }

    def runner_config(self) -> RunnerConfig:
        """Consumer pacing from settings."""
        s = self.settings
        return RunnerConfig(
            batch=s.consumer_batch,
            fetch_timeout_s=s.consumer_fetch_timeout_s,
            ack_wait_s=s.consumer_ack_wait_s,
            max_deliver=s.consumer_max_deliver,
            retry_backoff_s=s.consumer_retry_backoff_s,
            redelivery_backoff_s=s.consumer_redelivery_backoff_s,
            max_message_bytes=s.max_message_bytes,
            max_clock_skew_s=s.max_clock_skew_s,
            max_ack_pending=s.consumer_max_ack_pending,
        )

    def consumer_specs(self) -> list[ConsumerSpec]:
        """Every durable this service pulls from, its advisory watcher's included: what the
        administrator provisions (``provision``) and the start-up self-check verifies."""
        config = self.runner_config()
        specs = [consumer_spec(sub, config) for sub in self.subscriptions]
        if specs:
            watched = [
                (self.namespace.stream(sub.stream), self.namespace.durable(sub.name))
                for sub in self.subscriptions
            ]
            specs.append(watcher_spec(self.name, watched))
        return specs

    async def provision(self, js: JetStreamContext) -> None:
        """Create or check this service's streams and consumers through ``js``, a connection
        of the administrator: the service's own identity may only read them."""
        await ensure_topology(
            js, self.namespace, self.settings.stream_policy(), self.consumer_specs()
        )

    async def start(self) -> None:
        """Connect, migrate, self-check and start every loop."""
        s = self.settings
        conn = await db.connect_with_retry(s.database_url)
        try:
            migrations = db.messaging_migrations()
            if self._migration_package:
                migrations += db.load_migrations(self.name, self._migration_package)
            applied = await db.migrate(conn, self.schema, migrations)
        finally:
            await conn.close()
        if applied:
            log.info("applied migrations to schema %s: %s", self.schema, ", ".join(applied))
        pool = await db.create_pool(
            s.database_url,
            self.schema,
            min_size=s.db_pool_min,
            max_size=s.db_pool_max,
            application_name=f"lockstep-{self.name}",
        )
        try:
            nc = await natsconn.connect(
                s.nats_access(),
                name=f"lockstep-{self.name}",
                max_reconnect_attempts=-1,
                reconnect_time_wait=0.5,
                connect_timeout=5,
                error_cb=_log_nats_error,
                disconnected_cb=self._on_disconnect,
            )
        except Exception:
            await pool.close()
            raise
        js = nc.jetstream()
        self._runners = [
            ConsumerRunner(
                sub,
                nc=nc,
                js=js,
                pool=pool,
                namespace=self.namespace,
                registry=self._registry,
                metrics=self.metrics,
                source=self.source,
                config=self.runner_config(),
            )
            for sub in self.subscriptions
        ]
        specs = self.consumer_specs()
        watched = [(r.stream, r.durable) for r in self._runners]
        try:
            await ensure_topology(js, self.namespace, s.stream_policy(), specs)
        except Exception:
            await nc.close()
            await pool.close()
            raise
        self.relay = OutboxRelay(
            pool,
            js,
            self.namespace,
            RelayConfig(
                self.schema,
                s.relay_batch,
                s.relay_poll_s,
                retry_horizon_s=s.relay_retry_horizon_s,
                retention_s=s.outbox_retention_s,
            ),
            self.metrics,
        )
        try:
            port = await self._http.start(s.http_host, s.http_port)
        except OSError as exc:
            await nc.close()
            await pool.close()
            if exc.errno == errno.EADDRINUSE:
                prefix = str(s.model_config.get("env_prefix", "")).upper()
                raise ConfigurationError(
                    f"{s.http_host}:{s.http_port} ({prefix}HTTP_PORT) is already in use"
                ) from None
            raise
        self.resources = Resources(pool, nc, js, port)
        operator = OperatorResponder(
            self.name, self.namespace, self.source, self._operator_commands
        )
        tasks = [
            self.relay.run(),
            self._maintain(),
            *(r.run() for r in self._runners),
            *(w.run(self.resources, self._stopping) for w in self._workers),
            operator.run(self.resources, self._stopping),
        ]
        answering = len(tasks) - 1
        if watched:
            self._watcher = AdvisoryWatcher(js, pool, self.namespace, specs[-1])
            tasks.append(self._watcher.run())
        self.resources.tasks = [asyncio.create_task(t) for t in tasks]
        await _answering(operator, self.resources.tasks[answering])
        self.metrics.ready.set(1)
        log.info(
            "%s ready: schema=%s namespace=%s metrics=http://%s:%d/metrics",
            self.name,
            self.schema,
            self.namespace.name,
            s.http_host,
            port,
        )

    async def stop(self) -> None:
        """Finish in-flight work and disconnect, all within ``shutdown_grace_s``: a container
        engine kills a process that outlives its stop timeout (compose.yaml's
        ``stop_grace_period``), and when the whole deployment goes down at once NATS and
        PostgreSQL may be gone already, so no step may wait on them past the deadline."""
        deadline = asyncio.get_running_loop().time() + self.settings.shutdown_grace_s

        def left() -> float:
            return max(deadline - asyncio.get_running_loop().time(), 0.0)

        self._stopping.set()
        self.metrics.ready.set(0)
        res, self.resources = self.resources, None
        if res is None:
            return
        for runner in self._runners:
            runner.stop()
        if self._watcher:
            self._watcher.stop()
        if self.relay:
            self.relay.stop()
        _, pending = await asyncio.wait(res.tasks, timeout=left())
        for task in pending:
            task.cancel()
        results = await asyncio.gather(*res.tasks, return_exceptions=True)
        for task, result in zip(res.tasks, results, strict=True):
            if isinstance(result, Exception):
                log.error("task %s ended with an error: %s", task.get_name(), result)
        try:
            # Bounded: draining waits on a server that may be going down too (nats-py's own
            # drain timeout is 30 s).
            await asyncio.wait_for(res.nc.drain(), timeout=left())
        except Exception:  # noqa: BLE001 - stopping regardless: close it
            with contextlib.suppress(Exception):
                await res.nc.close()
        try:
            # Bounded: a connection a cancelled task never gave back would hold close() forever
            # (asyncpg waits for every connection's release; found by the chaos test's kills).
            await asyncio.wait_for(res.pool.close(), timeout=max(left(), 0.1))
        except TimeoutError:
            log.warning("%s: closing the database pool timed out; terminating it", self.name)
            res.pool.terminate()
        await self._http.stop()
        log.info("%s stopped", self.name)

    async def run_until_signalled(self) -> None:
        """Start, serve until SIGINT/SIGTERM, then stop gracefully."""
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await self.start()
        try:
            watchdog = asyncio.ensure_future(self._first_failure())
            await asyncio.wait(
                [asyncio.ensure_future(stop.wait()), watchdog], return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            await self.stop()

    async def _first_failure(self) -> None:
        """Return when a background loop dies unexpectedly, so the process exits non-zero."""
        res = self.resources
        if res is None:
            return
        done, _ = await asyncio.wait(res.tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            if not task.cancelled() and task.exception() is not None:
                log.error("background task failed; shutting down", exc_info=task.exception())
                raise SystemExit(1)

    async def _on_disconnect(self) -> None:
        if not self._stopping.is_set():
            log.warning("nats: disconnected; reconnecting")

    async def _maintain(self) -> None:
        """Retention purges of outbox rows, inbox ids, dead letters and operator requests: once
        as the service starts (a service restarted more often than the interval must still
        purge), then every ``maintenance_interval_s``."""
        s = self.settings
        resources, relay = self.resources, self.relay
        if resources is None or relay is None:
            return

        async def purge() -> None:
            purged = await relay.purge()
            async with resources.pool.acquire() as conn:
                forgotten = await inbox.purge(conn, s.inbox_retention_s)
                letters = await deadletter.purge(conn, s.dead_letter_retention_s)
                asked = await operator.purge(conn, s.operator_request_retention_s)
            log.info(
                "maintenance: purged %d outbox rows, %d inbox ids, %d dead letters, "
                "%d operator requests",
                purged,
                forgotten,
                letters,
                asked,
            )

        every = Every(
            s.maintenance_interval_s,
            what="maintenance",
            expected=db.OUTAGE,
        )
        await every.run(purge, self._stopping)


def _failed(task: asyncio.Task[None]) -> bool:
    return task.done() and not task.cancelled() and task.exception() is not None


async def _log_nats_error(exc: Exception) -> None:
    log.warning("nats: %s", describe(exc))


S = TypeVar("S", bound=ServiceSettings)


def run_service(create_app: Callable[[S], ServiceApp], settings_class: type[S]) -> None:
    """Entry point of a service process: settings from the environment, logs, run, exit code.

    Bad settings exit with status 2 and a message naming the variable; a refused start-up
    (topology or migration mismatch) exits with 3.
    """
    unknown = unknown_variables(os.environ, settings_class)
    try:
        settings = settings_class()
    except ValidationError as exc:
        for line in unknown:  # a typo may be why a default is in force
            sys.stderr.write(f"warning: {line}\n")
        sys.stderr.write(f"invalid settings: {explain(settings_class, exc)}\n")
        raise SystemExit(2) from None
    configure_logging(
        settings.log_level,
        json_lines=settings.log_json,
        service=create_app.__module__.split(".")[0],
    )
    for line in unknown:
        log.warning("%s", line)
    try:
        app = create_app(settings)  # reads files, checks settings against the topology
        asyncio.run(app.run_until_signalled())
    except ConfigurationError as exc:
        log.error("refusing to start: %s", exc)
        raise SystemExit(3) from None
