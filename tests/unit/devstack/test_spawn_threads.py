"""A server started from a worker thread outlives that thread (prctl(2) PDEATHSIG follows the
forking thread, not the process)."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from lockstep_devstack.process import spawn, stop

pytestmark = pytest.mark.unit


def test_a_child_spawned_from_a_thread_that_ends_keeps_running(tmp_path: Path) -> None:
    started: list[subprocess.Popen[bytes]] = []
    child = [sys.executable, "-c", "import sys; sys.stdin.read(); import time; time.sleep(60)"]

    def start() -> None:
        started.append(
            spawn(child, log_path=tmp_path / "child.log", parent_death_signal=signal.SIGTERM)
        )

    worker = threading.Thread(target=start)
    worker.start()
    worker.join()
    [proc] = started
    try:
        # The signal, had it been armed, is sent as the thread exits: by now it has arrived.
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=1.0)
    finally:
        stop(proc, signal.SIGTERM, timeout_s=5)
