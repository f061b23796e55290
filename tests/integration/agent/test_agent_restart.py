"""The real agent process (``lockstep-agent run``), logged in with its enrolled nkey on a real
nats-server configured as ``lockstep up`` configures it, killed (SIGKILL) and restarted during
a NATS outage: once NATS is back, every report it measured, before and after the kill, is stored
in the TELEMETRY stream exactly once, and the inventory sequence never repeats."""

from __future__ import annotations

import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from lockstep_agent.runner import SPOOL_FILE
from lockstep_cli.catalog import bus_permissions
from lockstep_cli.polling import until
from lockstep_common import natsconn
from lockstep_common.events import REGISTRY
from lockstep_common.events.v1 import HealthObserved, InventoryObserved
from lockstep_common.identities import ADMIN
from lockstep_common.subjects import Namespace
from lockstep_common.topology import StreamPolicy, ensure_topology
from lockstep_devstack import agents
from lockstep_devstack.nats import NatsServer
from lockstep_devstack.process import free_port
from tests.support import stored_telemetry

pytestmark = pytest.mark.integration
NS = Namespace("agentrestart")
NODE, SITE = "gpu-0001", "s1"
AGENT = [sys.executable, "-m", "lockstep_agent"]


@pytest.fixture
def base() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="lockstep-agent-restart-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _server(base: Path) -> NatsServer:
    agents.enroll(base, {NODE: SITE})
    return NatsServer(
        base / "nats",
        port=free_port(),
        sync_always=False,
        access=bus_permissions(NS),
        secrets_dir=base,
    )


def _config(base: Path, server: NatsServer, **extra: str) -> Path:
    root = base / "root"
    (root / "sys/module/nvidia").mkdir(parents=True, exist_ok=True)
    (root / "sys/module/nvidia/version").write_text("580.65.06\n")
    fields = {
        "node": f'"{NODE}"',
        "site": f'"{SITE}"',
        "namespace": f'"{NS.name}"',
        "nats_url": f'"{server.url}"',
        "nkey_file": f'"{agents.seed_path(agents.seed_dir(base), NODE)}"',
        "ca_file": f'"{server.ca_file}"',
        "data_dir": f'"{base / "agent"}"',
        "cadence_s": "0.1",
        "root": f'"{root}"',
    } | extra
    path = base / "agent.toml"
    path.write_text("".join(f"{k} = {v}\n" for k, v in fields.items()))
    return path


async def _topology(server: NatsServer) -> None:
    admin = await natsconn.connect(server.client(ADMIN), name="test-admin")
    await ensure_topology(admin.jetstream(), NS, StreamPolicy())
    await admin.close()


def _start(config: Path, log: Path) -> subprocess.Popen[bytes]:
    out = log.open("ab")
    return subprocess.Popen([*AGENT, "run", "--config", str(config)], stdout=out, stderr=out)


def _spooled(base: Path) -> set[str]:
    """The ids in the agent's spool, read as another process reads it: read-only, never
    taking a write lock the running agent would then wait on."""
    path = base / "agent" / SPOOL_FILE
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    try:
        return {row[0] for row in db.execute("SELECT msg_id FROM reports")}
    except sqlite3.OperationalError:  # the agent has not made its tables yet
        return set()
    finally:
        db.close()


async def test_killed_and_restarted_mid_outage_publishes_every_report_once(base: Path) -> None:
    server = _server(base)
    server.start(timeout_s=30)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        await _topology(server)
        server.stop()  # the outage starts before the agent does

        config = _config(base, server)
        log = base / "agent.log"
        procs.append(_start(config, log))

        async def spooled(at_least: int) -> set[str] | None:
            ids = _spooled(base) if (base / "agent" / SPOOL_FILE).exists() else set()
            return ids if len(ids) >= at_least else None

        before_kill = await until(lambda: spooled(6), what="6 reports spooled", timeout_s=60)
        procs[0].send_signal(signal.SIGKILL)
        procs[0].wait(timeout=10)
        survived = _spooled(base)
        assert before_kill <= survived  # the kill lost nothing that was spooled

        procs.append(_start(config, log))
        await until(
            lambda: spooled(len(survived) + 6),
            what="reports of the restarted agent",
            timeout_s=60,
        )
        server.start(timeout_s=30)

        async def drained() -> bool:
            return not _spooled(base)

        await until(drained, what="the spool drained once NATS is back", timeout_s=60)
        procs[1].send_signal(signal.SIGTERM)
        assert procs[1].wait(timeout=60) == 0, log.read_text()

        admin = await natsconn.connect(server.client(ADMIN), name="test-admin")
        try:
            stored = await stored_telemetry(admin.jetstream(), NS)
        finally:
            await admin.close()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        server.stop()

    _check_stored(stored, survived)


def _check_stored(stored: list[tuple[str, bytes]], survived: set[str]) -> None:
    ids: Counter[str] = Counter()
    sequences: Counter[int] = Counter()
    for _, body in stored:
        env = REGISTRY.decode(body, max_bytes=1 << 20)
        ids[str(env.event_id)] += 1
        assert env.source == f"/lockstep/agent-{NODE}"
        if isinstance(env.data, InventoryObserved):
            sequences[env.data.sequence] += 1
            assert env.data.loaded_module_version == "580.65.06"
        else:
            assert isinstance(env.data, HealthObserved)
    assert survived <= set(ids), "reports spooled before the kill never reached the stream"
    assert set(ids.values()) == {1}, "a report was stored twice"
    # The sequence goes on across the kill: 1..N, each once, none skipped.
    assert sorted(sequences) == list(range(1, len(sequences) + 1))
    assert set(sequences.values()) == {1}
    assert len(sequences) >= len(survived) // 2 + 3
