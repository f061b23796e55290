"""``lockstep up`` and ``lockstep demo`` started as a script starts a background job: with
SIGINT ignored (a non-interactive shell does that to ``cmd &``). Both still stop cleanly on
SIGINT and SIGTERM and leave no process behind (issue 14, item 9: the e2e runs hung there)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e.test_up import LOCKSTEP, alive, data_dir, descendants

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]
__all__ = ["data_dir"]


def ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def background(*args: str) -> subprocess.Popen[str]:
    """``lockstep ARGS &`` from a non-interactive shell script: SIGINT ignored."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKSTEP_")}
    env["COLUMNS"] = "200"
    return subprocess.Popen(
        [LOCKSTEP, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        text=True,
        preexec_fn=ignore_sigint,  # noqa: PLW1509 - exactly what the shell does before exec
    )


def read_until(proc: subprocess.Popen[str], needle: str, timeout_s: float = 150) -> str:
    assert proc.stdout is not None
    seen: list[str] = []
    deadline = time.monotonic() + timeout_s
    for line in proc.stdout:
        seen.append(line)
        if needle in line:
            return "".join(seen)
        assert time.monotonic() < deadline, "".join(seen)
    raise AssertionError(f"exited before {needle!r}:\n" + "".join(seen))


def stop(proc: subprocess.Popen[str], signum: int) -> tuple[int, str]:
    tree = descendants(proc.pid)
    proc.send_signal(signum)
    out, _ = proc.communicate(timeout=90)
    leftovers = {pid for pid in tree if alive(pid)}
    assert not leftovers, f"processes left behind: {leftovers}\n{out}"
    return proc.returncode, out


def test_up_in_the_background_of_a_script_stops_on_sigint(data_dir: Path) -> None:
    up = background("up", "--data-dir", str(data_dir))
    read_until(up, "Lockstep is up")
    code, out = stop(up, signal.SIGINT)
    assert code == 0 and "stopped." in out, out
    assert not (data_dir / "stack.json").exists()  # the CLI no longer finds a stack there


def test_demo_in_the_background_of_a_script_stops_on_sigterm(data_dir: Path) -> None:
    demo = background("demo", "--data-dir", str(data_dir))
    read_until(demo, "system up in")
    code, out = stop(demo, signal.SIGTERM)
    assert code == 130 and "demo interrupted: every process stopped." in out, out
