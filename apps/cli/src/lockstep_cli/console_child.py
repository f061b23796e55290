"""The console beside ``lockstep up``'s services: ``python -m lockstep_console`` as the
``reader`` identity (its NATS variables only: no database, no other identity's secret), on
loopback, logging to ``<data-dir>/logs/console.log``. Not restarted when it exits: it holds no
state, and ``lockstep console`` starts another."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from lockstep_common.identities import READER
from lockstep_devstack.process import stop

if TYPE_CHECKING:
    from lockstep_devstack import Stack

READY_S = 30.0


def checked(listen: str) -> str:
    """``lockstep up --console``: ``off``, or a loopback address; else one line, exit 2."""
    from lockstep_cli.cli_io import fail

    if why := refusal(listen):
        fail(why)
    return listen


def refusal(listen: str) -> str | None:
    """Why ``lockstep up --console`` cannot serve there (None: it can, or it is ``off``)."""
    from lockstep_console.listen import ListenError, parse

    if listen == "off":
        return None
    try:
        where = parse(listen)
    except ListenError as exc:
        return str(exc).replace("--listen", "--console")
    return None if where.loopback else f"--console {listen}: up serves it on loopback only"


@contextmanager
def beside(stack: Stack, log_dir: Path, listen: str) -> Iterator[tuple[str, str]]:
    """The console running for the block (unless ``listen`` is ``off``); its row of up's
    table."""
    if listen == "off":
        yield "console", "off (--console off)"
        return
    proc, log_path = start_console(stack, log_dir, listen)
    try:
        where = f"http://{listen}" if serving(proc, listen) else "not serving: see its log"
        yield "console (reader)", f"{where}  (log {log_path})"
    finally:
        stop(proc, signal.SIGTERM, timeout_s=5)


def start_console(stack: Stack, log_dir: Path, listen: str) -> tuple[subprocess.Popen[bytes], Path]:
    """Start it; returns the process and its log."""
    from lockstep_devstack.process import spawn

    env = {
        **{
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("PG", "LOCKSTEP_DATABASE", "LOCKSTEP_NATS"))
        },
        **stack.nats_env(READER),
    }
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / "console.log"
    proc = spawn(
        [sys.executable, "-m", "lockstep_console", "--listen", listen],
        log_path=log_path,
        parent_death_signal=signal.SIGTERM,
        env=env,
    )
    return proc, log_path


def serving(proc: subprocess.Popen[bytes], listen: str, timeout_s: float = READY_S) -> bool:
    """Whether it accepts connections on ``listen`` before it exits or ``timeout_s`` passes."""
    host, _, port = listen.rpartition(":")
    deadline = time.monotonic() + timeout_s
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.1)  # polling a condition (the port), not standing in for one
    return False
