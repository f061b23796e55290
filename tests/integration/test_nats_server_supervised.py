"""``lockstep up`` keeps its embedded nats-server running (issue 26): one that is killed is
reaped (no zombie left), reported with the end of its log, and started again on its port with
the services' backoff; clients reconnect to it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lockstep_cli.supervisor import ServiceProcess, supervise
from lockstep_devstack import Stack
from lockstep_devstack.nats import NatsServer
from lockstep_devstack.process import port_open
from tests.conftest import Servers


def state_of(pid: int) -> str | None:
    """The process state letter (``Z`` for a zombie), None when there is no such process."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return None


@pytest.fixture
def stack(servers: Servers, tmp_path: Path) -> Iterator[Stack]:
    with Stack(tmp_path, database_url=servers.database_url, durable=False) as st:
        yield st


def eventually(check: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    """Wait for ``check`` (a condition, never a fixed sleep); fail naming ``what``."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_a_killed_nats_server_is_reaped_reported_and_restarted(
    stack: Stack, tmp_path: Path
) -> None:
    assert isinstance(stack.nats, NatsServer) and stack.nats.proc is not None
    server = stack.nats
    old = stack.nats.proc.pid
    # A stand-in service that runs until told: the supervisor returns once it exits with a
    # configuration error's code (2), which is never restarted.
    service = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read(); sys.exit(2)"],
        stdin=subprocess.PIPE,
    )
    log = tmp_path / "svc.log"
    log.touch()
    lines: list[str] = []
    watcher = threading.Thread(
        target=supervise,
        args=(stack, [ServiceProcess("stand-in", 1, log, service)], lines.append),
        kwargs={"poll_s": 0.05},
    )
    watcher.start()
    try:
        os.kill(old, signal.SIGKILL)
        eventually(lambda: any("restarted" in line for line in lines), "the restart")
        assert state_of(old) is None  # reaped: not even a zombie
        assert any(f"exited with code {-signal.SIGKILL}" in line for line in lines), lines
        assert server.proc is not None and server.proc.pid != old
        eventually(lambda: port_open("127.0.0.1", server.port), "the server on its port")
    finally:
        assert service.stdin is not None
        service.stdin.close()
        watcher.join(timeout=30)
    assert not watcher.is_alive()
