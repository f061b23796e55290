"""``lockstep up``: the whole system on one machine.

Starts the embedded NATS and PostgreSQL (unless ``LOCKSTEP_NATS_URL`` / ``LOCKSTEP_DATABASE_URL``
point elsewhere), then each service as its own process, each with its own metrics port. Stop
order on Ctrl-C or SIGTERM: services first (they finish in-flight work), then NATS and
PostgreSQL, so nothing is left running.

Scaled out (``nats_cluster`` of 3 or more): the embedded NATS is a cluster of that many
servers, streams and consumers are R3, and the updater and the healthgate run two processes
each (``SCALED_OUT``) on the same schema and durable consumers: their work is claimed row by
row under fenced leases (``FOR UPDATE SKIP LOCKED``), so either process may die.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from pydantic_settings import SettingsConfigDict

from lockstep_cli.catalog import bus_parties
from lockstep_cli.restarts import RestartPolicy
from lockstep_cli.schemas import prepare_schemas
from lockstep_common.bus_access import Party, matrix
from lockstep_common.identities import ADMIN, SERVICE_NAMES
from lockstep_common.natsconn import NatsAccess, connect
from lockstep_common.service import ServiceApp
from lockstep_common.settings import ServiceSettings
from lockstep_common.subjects import Namespace
from lockstep_common.topology import ensure_topology
from lockstep_devstack import Stack
from lockstep_devstack.nats import NatsServer
from lockstep_devstack.nats_cluster import NatsCluster
from lockstep_devstack.process import StartFailed, free_port, reason, spawn, stop, tail

SERVICES = SERVICE_NAMES
# Processes per service when scaled out. The updater's node work items and the healthgate's
# soaked waves are claimed with fenced leases, so two processes split the work and either
# takes over what the other held when it dies; the other services run once.
SCALED_OUT: Mapping[str, int] = {"updater": 2, "healthgate": 2}
STREAM_REPLICAS_VAR = "LOCKSTEP_STREAM_REPLICAS"


def label_of(name: str, replica: int) -> str:
    """The service's name, with the replica's number after the first: ``updater-2``."""
    return name if replica == 1 else f"{name}-{replica}"


@dataclass
class ServiceProcess:
    """One service child process (``replica`` counts from 1 among the same service's)."""

    name: str
    port: int
    log_path: Path
    proc: subprocess.Popen[bytes]
    extra_env: dict[str, str] | None = None
    replica: int = 1

    @property
    def label(self) -> str:
        """Which process it is (``label_of``)."""
        return label_of(self.name, self.replica)

    @property
    def metrics_url(self) -> str:
        """Where its Prometheus metrics are served."""
        return f"http://127.0.0.1:{self.port}/metrics"

    def ready(self) -> bool:
        """True once ``/readyz`` answers 200."""
        try:
            url = f"http://127.0.0.1:{self.port}/readyz"
            with urllib.request.urlopen(url, timeout=1) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False


def start_service(
    name: str,
    stack: Stack,
    log_dir: Path,
    extra_env: dict[str, str] | None = None,
    *,
    port: int | None = None,
    replica: int = 1,
) -> ServiceProcess:
    """Run ``python -m lockstep_<name>`` against the stack (on ``port``, or a free one), as
    its own database role (``Stack.database_env``); every replica of a service shares its
    identity, schema and consumers, and has its own port and log."""
    port = port or free_port()
    env = {
        # No inherited PG* variable: libpq and asyncpg prefer PGPASSWORD to the role's passfile.
        **{k: v for k, v in os.environ.items() if not k.startswith("PG")},
        **stack.nats_env(name),
        **stack.database_env(name),
        f"LOCKSTEP_{name.upper()}_HTTP_PORT": str(port),
        **(extra_env or {}),
    }
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{label_of(name, replica)}.log"
    proc = spawn(
        [sys.executable, "-m", f"lockstep_{name}"],
        log_path=log_path,
        parent_death_signal=signal.SIGTERM,
        env=env,
    )
    return ServiceProcess(name, port, log_path, proc, extra_env, replica)


class ServerWatch:
    """The embedded nats-servers of a stack, kept running: one that exits (killed, crashed)
    is reaped at once (no zombie), reported with the end of its log, and started again on its
    ports and store after the backoff :class:`RestartPolicy` gives, as a service would be."""

    def __init__(self, stack: Stack, report: Callable[[str], None]) -> None:
        nats = stack.nats
        self.servers: list[NatsServer] = (
            [] if nats is None else nats.members if isinstance(nats, NatsCluster) else [nats]
        )
        self.report = report
        self.policies = {m.name: RestartPolicy(fatal=frozenset()) for m in self.servers}
        self.due: dict[str, float] = {}
        now = time.monotonic()
        for policy in self.policies.values():
            policy.started(now)

    def check(self, now: float) -> None:
        """Reap, report and restart what is due."""
        for m in self.servers:
            policy = self.policies[m.name]
            if m.name in self.due:
                if now < self.due[m.name]:
                    continue
                del self.due[m.name]
                try:
                    m.spawn()
                except OSError as exc:
                    wait = policy.delay_after(1, now) or 60.0
                    self.due[m.name] = now + wait
                    self.report(
                        f"nats-server {m.name} could not start ({exc}); retry in {wait:.0f}s"
                    )
                    continue
                policy.started(now)
                pid = m.proc.pid if m.proc is not None else "?"
                self.report(f"nats-server {m.name} restarted (pid {pid})")
                continue
            code = None if m.proc is None else m.proc.poll()  # poll() reaps it
            if code is None:
                continue
            delay = policy.delay_after(code, now) or 0.0
            self.due[m.name] = now + delay
            self.report(
                f"nats-server {m.name} exited with code {code}; restart in {delay:.0f}s:\n"
                f"{tail(m.log_path, 5)}"
            )


class Watch(Protocol):
    """Another process kept running beside the services (the console: ``ConsoleWatch``)."""

    def check(self, now: float) -> None:
        """Reap, report and restart it when due."""
        ...


def supervise(
    stack: Stack,
    services: list[ServiceProcess],
    report: Callable[[str], None],
    *,
    poll_s: float = 0.5,
    also: Sequence[Watch] = (),
) -> None:
    """Keep ``services`` and the stack's embedded nats-servers running until interrupted.

    A service that exits is started again (same port, same log) after the backoff
    :class:`RestartPolicy` gives, and the end of its log is reported; one that exited because
    of its configuration (codes 2, 3) is left stopped. ``services`` is updated in place, so
    whoever stops them later stops the restarted processes. A nats-server that exits is
    reaped, reported and started again the same way (:class:`ServerWatch`), and so is each of
    ``also``. Returns when no service is left running.
    """
    servers = ServerWatch(stack, report)
    policies = {svc.label: RestartPolicy() for svc in services}
    for svc in services:
        policies[svc.label].started(time.monotonic())
    due: dict[int, float] = {}  # index in services -> when it may start again
    given_up: set[int] = set()
    while len(given_up) < len(services):
        now = time.monotonic()
        servers.check(now)
        for watch in also:
            watch.check(now)
        for i, svc in enumerate(services):
            if i in given_up:
                continue
            if i in due:
                if now >= due[i]:
                    del due[i]
                    try:
                        services[i] = start_service(
                            svc.name,
                            stack,
                            svc.log_path.parent,
                            svc.extra_env,
                            port=svc.port,
                            replica=svc.replica,
                        )
                    except OSError as exc:  # could not even spawn it: try again later
                        wait = policies[svc.label].delay_after(1, now) or 60.0
                        due[i] = now + wait
                        report(f"service {svc.label} could not start ({exc}); retry in {wait:.0f}s")
                        continue
                    policies[svc.label].started(now)
                    report(f"service {svc.label} restarted (pid {services[i].proc.pid})")
                continue
            code = svc.proc.poll()
            if code is None:
                continue
            delay = policies[svc.label].delay_after(code, now)
            last = tail(svc.log_path, 5)
            if delay is None:
                given_up.add(i)
                report(
                    f"service {svc.label} exited with code {code}, a configuration error that a "
                    f"restart cannot fix; it stays stopped:\n{last}"
                )
            else:
                due[i] = now + delay
                report(
                    f"service {svc.label} exited with code {code}; restart in {delay:.0f}s:\n{last}"
                )
        time.sleep(poll_s)


def wait_ready(services: Sequence[ServiceProcess], timeout_s: float = 90.0) -> None:
    """Wait until every service is ready; raise with the log of one that died or hung."""
    deadline = time.monotonic() + timeout_s
    pending = list(services)
    while pending:
        for svc in list(pending):
            if svc.proc.poll() is not None:
                raise StartFailed(
                    f"service {svc.label} exited with code {svc.proc.returncode} while starting: "
                    f"{service_reason(svc.log_path)} (log {svc.log_path})"
                )
            if svc.ready():
                pending.remove(svc)
        if pending and time.monotonic() > deadline:
            names = ", ".join(s.label for s in pending)
            raise StartFailed(
                f"not ready after {timeout_s:.0f}s: {names} (log {pending[0].log_path})"
            )
        time.sleep(0.1)


def service_reason(log_path: Path) -> str:
    """Why a service stopped: its last error log line's message (the logs are JSON lines), or
    the last line it wrote to stderr (bad settings are reported before logging starts)."""
    for line in reversed(tail(log_path, 40).splitlines()):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and str(record.get("level")).lower() in ("error", "critical"):
            return str(record.get("message", line))
    return reason(log_path)


def stop_services(services: Sequence[ServiceProcess]) -> None:
    """SIGTERM all, then wait for each (they finish in-flight work first)."""
    for svc in services:
        if svc.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                svc.proc.send_signal(signal.SIGTERM)
    for svc in services:
        stop(svc.proc, signal.SIGTERM, timeout_s=30)


@contextlib.contextmanager
def running_system(
    data_dir: Path,
    names: Sequence[str] = SERVICES,
    *,
    durable: bool = True,
    extra_env: dict[str, str] | None = None,
    extra_parties: Mapping[str, Party] | None = None,
    report: Callable[[str], None] = lambda _: None,
    nats_cluster: int = 1,
    replicas: Mapping[str, int] | None = None,
) -> Iterator[tuple[Stack, list[ServiceProcess]]]:
    """The stack plus the named services, stopped in the right order on exit.

    The embedded NATS requires TLS and one identity per party, with the permissions
    ``catalog.bus_permissions`` derives from the code (``extra_parties`` adds more, e.g. the
    demo's own producer and consumer). Every service's database role, schema and migrations
    are set up by the admin first (``schemas.prepare_schemas``).

    ``nats_cluster`` of 3 or more (odd): that many embedded nats-servers in one cluster, every
    stream and consumer created with three replicas (``LOCKSTEP_STREAM_REPLICAS=3`` for the
    provisioning and for every service's self-check), and ``SCALED_OUT`` processes of the
    updater and the healthgate. ``replicas``: how many processes of a service to run (1 for
    those it does not name), instead of that default."""
    namespace = Namespace(os.environ.get("LOCKSTEP_NAMESPACE", "lockstep"))
    stack = Stack(
        data_dir,
        nats_url=os.environ.get("LOCKSTEP_NATS_URL"),
        database_url=os.environ.get("LOCKSTEP_DATABASE_URL"),
        durable=durable,
        access=matrix(namespace, {**bus_parties(namespace), **(extra_parties or {})}),
        nats_cluster=nats_cluster,
    )
    services: list[ServiceProcess] = []
    with stack:
        scaled = {STREAM_REPLICAS_VAR: str(stack.stream_replicas)} if nats_cluster > 1 else {}
        env = {**local_defaults(data_dir, os.environ), **(extra_env or {}), **scaled}
        env |= one_gate_policy({**os.environ, **env})
        try:
            if stack.nats is not None:  # an external NATS is its operator's to provision
                apps = [service_app(n, {**stack.nats_env(n), **env}) for n in SERVICES]
                with _environment(scaled):  # the streams' replicas (StackSettings)
                    asyncio.run(provision_topology(stack.nats_client(ADMIN), namespace, apps))
            prepare_schemas(stack, SERVICES, report)
            if replicas is None:
                replicas = SCALED_OUT if nats_cluster > 1 else {}
            services.extend(
                start_service(n, stack, data_dir / "logs", env or None, replica=r)
                for n in names
                for r in range(1, replicas.get(n, 1) + 1)
            )
            wait_ready(services)
            yield stack, services
        finally:
            stop_services(services)


APPROVERS_DIR_VAR = "LOCKSTEP_PLANNER_APPROVERS_DIR"


def local_defaults(data_dir: Path, environ: Mapping[str, str]) -> dict[str, str]:
    """Settings a local stack gives its services unless the environment names its own: the
    planner's approvers trust store ``<data-dir>/approvers`` (made 0700; one ``NAME.pem`` per
    approver, ``lockstep approver keygen``, read again at each approval), without which no
    change class that needs an approval could ever start."""
    if APPROVERS_DIR_VAR in environ:
        return {}
    approvers = data_dir / "approvers"
    approvers.mkdir(mode=0o700, parents=True, exist_ok=True)
    return {APPROVERS_DIR_VAR: str(approvers)}


HEALTHGATE_POLICY_VAR = "LOCKSTEP_HEALTHGATE_POLICY_FILE"
PLANNER_GATE_POLICY_VAR = "LOCKSTEP_PLANNER_GATE_POLICY_FILE"


def one_gate_policy(environ: Mapping[str, str]) -> dict[str, str]:
    """The planner reads the healthgate's gate policy unless told otherwise: it refuses a plan
    whose strata are too small for the policy's [minimum] (docs/rollouts.md), which is only
    right when both read the same file."""
    if HEALTHGATE_POLICY_VAR in environ and PLANNER_GATE_POLICY_VAR not in environ:
        return {PLANNER_GATE_POLICY_VAR: environ[HEALTHGATE_POLICY_VAR]}
    return {}


class StackSettings(ServiceSettings):
    """The deployment-wide settings ``lockstep up`` provisions streams with: the shared
    ``LOCKSTEP_STREAM_MAX_AGE_S`` / ``LOCKSTEP_STREAM_MAX_BYTES``, and the defaults every
    service has for the rest."""

    model_config = SettingsConfigDict(
        env_prefix="LOCKSTEP_STACK_", extra="forbid", validate_default=True, populate_by_name=True
    )


@contextlib.contextmanager
def _environment(overlay: Mapping[str, str]) -> Iterator[None]:
    """``os.environ`` with ``overlay`` applied, restored after: a service's settings are read
    from the environment it will run with."""
    saved = dict(os.environ)
    os.environ.update(overlay)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def service_app(name: str, env: Mapping[str, str]) -> ServiceApp:
    """Service ``name`` as built from ``env`` (no I/O until started): its declared topology."""
    app_module = importlib.import_module(f"lockstep_{name}.app")
    settings_module = importlib.import_module(f"lockstep_{name}.settings")
    with _environment(env):
        settings = settings_module.Settings()
        app: ServiceApp = app_module.create_app(settings)
    return app


async def provision_topology(
    access: NatsAccess, namespace: Namespace, apps: Sequence[ServiceApp]
) -> None:
    """Create the streams (or set their configured limits) and every service's consumers, as
    the ``admin`` identity: services may only read them (``bus_access``)."""
    nc = await connect(access, name="lockstep-topology")
    try:
        js = nc.jetstream()
        await ensure_topology(js, namespace, StackSettings().stream_policy())
        for app in apps:
            await app.provision(js)
    finally:
        await nc.close()


class Interrupted(Exception):
    """SIGTERM arrived: unwind like Ctrl-C."""


@contextlib.contextmanager
def stop_signals_unwind() -> Iterator[None]:
    """SIGINT and SIGTERM unwind the main thread the way Ctrl-C does (issue 14, item 9).

    SIGINT gets Python's own handler back (``KeyboardInterrupt``) even when it was ignored: a
    non-interactive shell starts background jobs (``lockstep up &`` in a script, CI) with
    SIGINT ignored, and Python leaves an ignored SIGINT ignored (``signal`` module docs), so
    ``kill -INT`` did nothing and the script hung. SIGTERM raises :class:`Interrupted`.
    """

    def terminate(signum: int, frame: object) -> None:
        raise Interrupted

    previous = {
        signal.SIGINT: signal.signal(signal.SIGINT, signal.default_int_handler),
        signal.SIGTERM: signal.signal(signal.SIGTERM, terminate),
    }
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
