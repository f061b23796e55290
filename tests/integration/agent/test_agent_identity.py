"""The agent says in one line, and exits non-zero, why it cannot report: a server whose
certificate its CA did not sign, a key the server refuses (revoked, another node's)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from lockstep_agent.runner import SPOOL_FILE
from lockstep_cli.polling import until
from lockstep_devstack import agents
from lockstep_devstack.nats import NatsServer
from lockstep_devstack.tls import server_tls
from tests.integration.agent.test_agent_restart import (
    NODE,
    SITE,
    _config,
    _server,
    _start,
    _topology,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def running() -> Iterator[tuple[Path, NatsServer]]:
    base = Path(tempfile.mkdtemp(prefix="lockstep-agent-identity-"))
    server = _server(base)
    server.start(timeout_s=30)
    try:
        yield base, server
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


def _run(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lockstep_agent", "run", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _last_line(done: subprocess.CompletedProcess[str]) -> str:
    return done.stderr.strip().splitlines()[-1]


def test_a_server_certificate_of_another_ca_is_refused(running: tuple[Path, NatsServer]) -> None:
    base, server = running
    other = server_tls(base / "other-ca")
    done = _run(_config(base, server, ca_file=f'"{other.ca}"'))
    assert done.returncode == 3
    assert _last_line(done) == (
        f"lockstep-agent: node {NODE}: the NATS server's certificate is not trusted by CA file "
        f"{other.ca}: unable to get local issuer certificate"
    )


def test_a_revoked_node_is_told_so(running: tuple[Path, NatsServer]) -> None:
    base, server = running
    seed = agents.seed_path(agents.seed_dir(base), NODE)
    kept = base / "kept.nk"
    shutil.copy(seed, kept)  # the node still holds its old seed; revoke deletes the operator's
    kept.chmod(0o600)
    agents.revoke(base, [NODE])
    server.reload()
    done = _run(_config(base, server, nkey_file=f'"{kept}"'))
    assert done.returncode == 3
    assert _last_line(done) == (
        f"lockstep-agent: node {NODE}: the NATS server refused agent-{NODE}'s key (not "
        f"enrolled, revoked, or another node's key in {kept})"
    )


def test_another_nodes_key_is_refused(running: tuple[Path, NatsServer]) -> None:
    base, server = running
    agents.enroll(base, {"gpu-0002": SITE})
    server.reload()
    other = agents.seed_path(agents.seed_dir(base), "gpu-0002")
    done = _run(_config(base, server, nkey_file=f'"{other}"'))
    assert done.returncode == 3
    line = _last_line(done)
    assert line.startswith(
        f"lockstep-agent: node {NODE}: the NATS server does not let this key publish "
        f"agent-{NODE}'s reports (is {other} another node's key?): "
    ), line
    assert line.endswith(f'.s1.{NODE}"')


async def test_a_running_agent_revoked_stops_with_one_line(
    running: tuple[Path, NatsServer],
) -> None:
    base, server = running
    await _topology(server)
    seed = agents.seed_path(agents.seed_dir(base), NODE)
    kept = base / "kept.nk"
    shutil.copy(seed, kept)
    kept.chmod(0o600)
    log = base / "agent.log"
    proc = _start(_config(base, server, nkey_file=f'"{kept}"'), log)
    try:
        spool = base / "agent" / SPOOL_FILE

        async def reported() -> bool:
            # Reporting for real: the spool exists and has been drained at least once.
            return spool.exists() and "connected to NATS as" in log.read_text()

        await until(reported, what="the agent connected and reporting", timeout_s=30)
        agents.revoke(base, [NODE])
        server.reload()
        assert proc.wait(timeout=30) == 3
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    last = log.read_text().strip().splitlines()[-1]
    assert last == (
        f"lockstep-agent: node {NODE}: the NATS server refused agent-{NODE}'s key (not "
        f"enrolled, revoked, or another node's key in {kept})"
    )
