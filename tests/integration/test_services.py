"""Each service's composition root against real servers: ready, observable, clean to stop."""

from __future__ import annotations

import asyncio
import importlib
import os
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from lockstep_cli.polling import until
from lockstep_common.service import Resources, ServiceApp
from tests.support import make_app

pytestmark = pytest.mark.integration

SERVICES = ("inventory", "planner", "updater", "healthgate", "attest")


def build(name: str, servers: Any, namespace: str) -> ServiceApp:
    app_module = importlib.import_module(f"lockstep_{name}.app")
    settings_module = importlib.import_module(f"lockstep_{name}.settings")
    settings = settings_module.Settings(
        nats_url=servers.nats_url,
        database_url=servers.database_url,
        namespace=namespace,
        db_schema=f"{namespace}_{name}",
    )
    app: ServiceApp = app_module.create_app(settings)
    return app


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


@pytest.mark.parametrize("name", SERVICES)
async def test_create_app_does_no_io_until_started(name: str, servers: Any, namespace: str) -> None:
    build(name, servers, namespace)
    # Building is what `lockstep up` and the CLI do before anything may connect: the schema
    # (created by start's migrations) must not exist yet.
    conn = await asyncpg.connect(servers.database_url)
    try:
        schema = await conn.fetchval(
            "SELECT nspname FROM pg_namespace WHERE nspname = $1", f"{namespace}_{name}"
        )
    finally:
        await conn.close()
    assert schema is None


@pytest.mark.parametrize("name", SERVICES)
async def test_service_starts_reports_ready_and_stops(
    name: str, servers: Any, namespace: str
) -> None:
    app = build(name, servers, namespace)
    await app.start()
    try:
        port = app.require().http_port
        status, body = await _get(port, "/readyz")
        assert status == 200 and '"ready": true' in body
        status, metrics = await _get(port, "/metrics")
        assert status == 200 and "lockstep_ready 1.0" in metrics
        tables = await app.require().pool.fetch(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = $1", app.schema
        )
        assert {"outbox", "inbox", "dead_letters", "schema_migrations"} <= {t[0] for t in tables}
    finally:
        await app.stop()
    with pytest.raises(urllib.error.URLError):  # stopped: nothing listens on its port any more
        await _get(port, "/readyz")


async def _get(port: int, path: str) -> tuple[int, str]:
    import asyncio

    return await asyncio.to_thread(get, port, path)


def _run_service(module: str, **variables: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKSTEP_")}
    return subprocess.run(
        [sys.executable, "-m", module],
        env={**env, **variables},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_service_refusing_its_settings_at_build_exits_3_with_one_line(tmp_path: Path) -> None:
    # A rules file that cannot be read is refused when the app is built: that must be the
    # clean refusal (exit 3), not a traceback that `lockstep up` would restart for ever.
    missing = tmp_path / "rules.json"
    result = _run_service("lockstep_inventory", LOCKSTEP_INVENTORY_RULES_FILE=str(missing))
    assert result.returncode == 3, result.stderr
    assert f"rules_file {missing}" in result.stderr and "Traceback" not in result.stderr


def test_a_stream_kept_longer_than_the_inbox_remembers_exits_2_with_one_line() -> None:
    # DRIFT kept 60 days, event ids remembered 31 (the default): a replay could apply twice.
    result = _run_service("lockstep_planner", LOCKSTEP_STREAM_MAX_AGE_S='{"DRIFT": 5184000}')
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        "invalid settings: inbox_retention_s (2678400) must exceed the longest stream max age "
        "(5184000 s): a replay of an event still stored would otherwise be applied twice\n"
    )


class _Once:
    """A background loop that ends by design (like a sweep worker with sweeps off), or fails."""

    def __init__(self, error: Exception | None = None) -> None:
        self.error = error
        self.ran = asyncio.Event()

    async def run(self, resources: Resources, stopping: asyncio.Event) -> None:
        self.ran.set()
        if self.error is not None:
            raise self.error


@pytest.mark.parametrize(("error", "ready"), [(None, True), (RuntimeError("boom"), False)])
async def test_a_loop_that_ends_by_design_keeps_the_service_ready_one_that_failed_does_not(
    error: Exception | None, ready: bool, servers: Any, namespace: str
) -> None:
    worker = _Once(error)
    app = make_app(servers, namespace, "looping")
    app.add_workers(worker)
    await app.start()
    try:
        await worker.ran.wait()
        await until(lambda: _all_done(app, worker), "the loop to end")
        assert app.readiness()["loops"] is ready
    finally:
        await app.stop()


async def _all_done(app: ServiceApp, worker: _Once) -> bool:
    return worker.ran.is_set() and any(t.done() for t in app.require().tasks)


async def test_a_taken_http_port_is_refused_naming_the_port_and_its_variable(
    servers: Any, namespace: str
) -> None:
    from lockstep_common.errors import ConfigurationError
    from lockstep_inventory.app import create_app
    from lockstep_inventory.settings import Settings

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        app = create_app(
            Settings(
                nats_url=servers.nats_url,
                database_url=servers.database_url,
                namespace=namespace,
                db_schema=f"{namespace}_inventory",
                http_port=port,
            )
        )
        with pytest.raises(ConfigurationError) as refused:
            await app.start()
    assert str(refused.value) == (
        f"127.0.0.1:{port} (LOCKSTEP_INVENTORY_HTTP_PORT) is already in use"
    )


async def test_stop_ends_within_its_grace_even_with_a_connection_never_given_back(
    servers: Any, namespace: str
) -> None:
    # Found by the chaos test (tests/integration/chaos): a service killed mid-step could leave a
    # pooled connection unreleased, and stop() then waited in pool.close() forever.
    app = make_app(servers, namespace, "leaky", shutdown_grace_s=0.5)
    await app.start()
    pool = app.require().pool
    await pool.acquire()  # held by "a task that is gone": never released
    await asyncio.wait_for(app.stop(), timeout=10)  # without the bound: waits forever
    assert pool.is_closing() and app.resources is None


@pytest.mark.parametrize("name", ["attest", "updater", "healthgate"])
async def test_stopping_ends_within_the_grace_even_when_nats_never_drains(
    name: str, servers: Any, namespace: str
) -> None:
    """Issue 31: in a container these were killed at ``down`` (NATS going down with them, and
    nats-py's drain waits 30 s): the whole stop is bounded by ``shutdown_grace_s``."""
    app_module = importlib.import_module(f"lockstep_{name}.app")
    settings_module = importlib.import_module(f"lockstep_{name}.settings")
    app: ServiceApp = app_module.create_app(
        settings_module.Settings(
            nats_url=servers.nats_url,
            database_url=servers.database_url,
            namespace=namespace,
            db_schema=f"{namespace}_{name}",
            shutdown_grace_s=2.0,
        )
    )
    await app.start()
    nc = app.require().nc
    never = asyncio.Event()

    async def hangs() -> None:
        await never.wait()

    nc.drain = hangs  # type: ignore[method-assign]
    # Fails (TimeoutError) when a step waits on the server past the grace.
    await asyncio.wait_for(app.stop(), timeout=2.0 + 3.0)
    assert nc.is_closed
