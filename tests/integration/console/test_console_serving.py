"""``lockstep up`` reports the console as serving only when this console process bound its
address: another listener on the port (an earlier console, anything) answered connections while
the new console failed to bind, and up's table said ``http://...`` for a console that had
exited."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from lockstep_cli.console_child import serving
from lockstep_devstack.process import spawn, stop

pytestmark = pytest.mark.integration


def console(listen: str, log_path: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKSTEP_NATS")}
    # No bus here: the console serves anyway (its pages poll) and says so in its log.
    env["LOCKSTEP_NATS_URL"] = "nats://127.0.0.1:9"
    argv = [sys.executable, "-m", "lockstep_console", "--listen", listen]
    return spawn(argv, log_path=log_path, parent_death_signal=signal.SIGTERM, env=env)


@pytest.fixture
def taken() -> Iterator[int]:
    """A port something else already listens on."""
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        yield other.getsockname()[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_console_whose_port_another_listener_holds_is_not_reported_serving(
    taken: int, tmp_path: Path
) -> None:
    log_path = tmp_path / "console.log"
    proc = console(f"127.0.0.1:{taken}", log_path)
    try:
        assert not serving(proc, log_path)
        assert proc.wait(timeout=30) != 0
    finally:
        stop(proc, signal.SIGTERM, timeout_s=5)


def test_a_console_that_bound_its_port_is_reported_serving(tmp_path: Path) -> None:
    log_path = tmp_path / "console.log"
    log_path.write_text("console serving (pid 1)\n")  # an earlier run's line is not this one's
    proc = console(f"127.0.0.1:{free_port()}", log_path)
    try:
        assert serving(proc, log_path)
        assert proc.poll() is None
    finally:
        stop(proc, signal.SIGTERM, timeout_s=5)
