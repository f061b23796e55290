"""``lockstep up`` keeps its console running as it keeps the services (issue 32): a console
that crashes or is killed is reaped, reported with the end of its log and started again after
the backoff; one that exits with a configuration error stays stopped."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from lockstep_cli.console_child import ConsoleWatch

pytestmark = pytest.mark.unit


class Consoles:
    """Stand-ins for the console's process: each start runs the next program given."""

    def __init__(self, log: Path, *programs: str) -> None:
        self.log, self.programs = log, list(programs)
        self.started: list[subprocess.Popen[bytes]] = []

    def __call__(self) -> subprocess.Popen[bytes]:
        with self.log.open("ab") as out:
            proc = subprocess.Popen([sys.executable, "-c", self.programs.pop(0)], stdout=out)
        self.started.append(proc)
        return proc


@pytest.fixture
def log(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "console.log"


def test_a_crashed_console_is_reported_and_started_again_after_the_backoff(log: Path) -> None:
    consoles = Consoles(
        log, "print('listening'); raise SystemExit(1)", "import time; time.sleep(60)"
    )
    said: list[str] = []
    watch = ConsoleWatch(consoles, log, said.append, now=0.0)
    try:
        watch.check(0.1)
        assert said == []  # running (or not yet reaped): nothing to say
        consoles.started[0].wait()
        watch.check(10.0)
        assert said == ["console exited with code 1; restart in 1s:\nlistening"]
        watch.check(10.5)  # the backoff is not over
        assert len(consoles.started) == 1
        watch.check(11.0)
        assert len(consoles.started) == 2 and watch.proc is consoles.started[1]
        assert said[-1] == f"console restarted (pid {consoles.started[1].pid})"
        watch.check(12.0)
        assert len(said) == 2  # the new one runs
    finally:
        for proc in consoles.started:
            proc.kill()
            proc.wait()


def test_a_console_refusing_its_settings_stays_stopped(log: Path) -> None:
    consoles = Consoles(log, "print('--listen: address in use'); raise SystemExit(2)")
    said: list[str] = []
    watch = ConsoleWatch(consoles, log, said.append, now=0.0)
    consoles.started[0].wait()
    for now in (1.0, 100.0, 1000.0):
        watch.check(now)
    assert len(consoles.started) == 1
    assert said == [
        "console exited with code 2, a configuration error that a restart cannot fix; "
        "it stays stopped:\n--listen: address in use"
    ]
