"""The README's "Your first rollout", run exactly as written: its first shell block (keys,
trust store, approver, change classes, `lockstep up`) in one shell, its second (the simulated
fleet, a bundle built, signed and submitted, a rollout planned, started, approved and watched)
in another, from the same directory. The walkthrough ends with the rollout `completed`."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(420)]

ROOT = Path(__file__).resolve().parents[2]
SECTION = "### Your first rollout\n"
BASH = shutil.which("bash") or "/bin/bash"


def blocks() -> list[str]:
    """The section's shell blocks, as a user copies them."""
    text = (ROOT / "README.md").read_text()
    section = text.split(SECTION, 1)[1].split("\n### ", 1)[0]
    return re.findall(r"```sh\n(.*?)```", section, flags=re.DOTALL)


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A directory standing in for the checkout: the README's commands run from its root and
    activate its `.venv`."""
    path = Path(tempfile.mkdtemp(prefix="lockstep-e2e-first-"))
    path.chmod(0o755)
    (path / ".venv").symlink_to(ROOT / ".venv")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def shell_env() -> dict[str, str]:
    """A user's shell: nothing LOCKSTEP_* exported, output not to a terminal."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKSTEP_")}
    env.pop("VIRTUAL_ENV", None)
    return env


def test_blocks_are_the_two_shells() -> None:
    first, second = blocks()
    assert first.rstrip().endswith("lockstep up")
    assert "lockstep rollout status --watch" in second


def test_the_first_rollout_walkthrough_ends_completed(workdir: Path) -> None:
    first, second = blocks()
    up = subprocess.Popen(
        [BASH, "-e", "-c", first],
        cwd=workdir,
        env=shell_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    output: list[str] = []
    try:
        assert up.stdout is not None
        for line in up.stdout:  # the first shell prints the stack once it is up
            output.append(line)
            if "Lockstep is up" in line:
                break
        else:
            raise AssertionError("the first shell ended early:\n" + "".join(output))
        started = time.monotonic()
        log = workdir / "second-shell.log"
        with log.open("w") as sink:
            second_shell = subprocess.Popen(
                [BASH, "-e", "-o", "pipefail", "-c", second],
                cwd=workdir,
                env=shell_env(),
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            returncode: int | str = second_shell.wait(timeout=240)
        except subprocess.TimeoutExpired:
            returncode = "still running after 240 s"
        finally:  # what it left in the background (the simulator when a step failed)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(second_shell.pid, signal.SIGTERM)
        took = time.monotonic() - started
        walked = log.read_text()
        assert returncode == 0, walked[-8000:]
        assert "attested" in walked, walked
        rollout = json.loads((workdir / "start.json").read_text())["rollout_id"]
        listed = [line for line in walked.splitlines() if rollout in line and "│" in line]
        assert listed and "completed" in listed[-1], walked  # `rollout list`
        print(f"second shell took {took:.0f}s")
    finally:
        os.killpg(up.pid, signal.SIGINT)  # Ctrl-C in the first shell
        out, _ = up.communicate(timeout=90)
        output.append(out)
    assert up.returncode in (0, 130), "".join(output)
