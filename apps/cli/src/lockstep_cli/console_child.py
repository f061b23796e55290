"""The console beside ``lockstep up``'s services: ``python -m lockstep_console`` as the
``reader`` identity (its NATS variables only: no database, no other identity's secret), on
loopback, logging to ``<data-dir>/logs/console.log``. Under ``lockstep up`` it is kept running
as the services are (``ConsoleWatch``, checked by ``supervisor.supervise``); the demo, minutes
long, only starts and stops it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from lockstep_cli.restarts import RestartPolicy
from lockstep_common.identities import READER
from lockstep_devstack.process import stop, tail

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
    return None if where.loopback else f"--console {listen}: it is served on loopback only"


@contextmanager
def beside(stack: Stack, log_dir: Path, listen: str) -> Iterator[tuple[str, str]]:
    """The console running for the block (unless ``listen`` is ``off``); its row of up's
    table."""
    if listen == "off":
        yield "console", "off (--console off)"
        return
    proc, log_path = start_console(stack, log_dir, listen)
    try:
        where = f"http://{listen}" if serving(proc, log_path) else "not serving: see its log"
        yield "console (reader)", f"{where}  (log {log_path})"
    finally:
        stop(proc, signal.SIGTERM, timeout_s=5)


class ConsoleWatch:
    """The console beside ``lockstep up``'s services, kept running as they are: one that exits
    (killed, crashed) is reaped at once, reported with the end of its log and started again on
    the same address after the backoff ``RestartPolicy`` gives; one that exits with a
    configuration error (2, 3: its address refused) stays stopped, as a service would."""

    def __init__(
        self,
        start: Callable[[], subprocess.Popen[bytes]],
        log_path: Path,
        report: Callable[[str], None],
        *,
        now: float,
    ) -> None:
        self.start, self.log_path, self.report = start, log_path, report
        self.proc = start()
        self.policy = RestartPolicy()
        self.policy.started(now)
        self.due: float | None = None  # when it may start again
        self.given_up = False

    def check(self, now: float) -> None:
        """Reap, report and restart what is due."""
        if self.given_up:
            return
        if self.due is not None:
            if now < self.due:
                return
            self.due = None
            try:
                self.proc = self.start()
            except OSError as exc:  # could not even spawn it: try again later
                wait = self.policy.delay_after(1, now) or 60.0
                self.due = now + wait
                self.report(f"console could not start ({exc}); retry in {wait:.0f}s")
                return
            self.policy.started(now)
            self.report(f"console restarted (pid {self.proc.pid})")
            return
        code = self.proc.poll()  # poll() reaps it
        if code is None:
            return
        delay = self.policy.delay_after(code, now)
        last = tail(self.log_path, 5)
        if delay is None:
            self.given_up = True
            self.report(
                f"console exited with code {code}, a configuration error that a restart "
                f"cannot fix; it stays stopped:\n{last}"
            )
        else:
            self.due = now + delay
            self.report(f"console exited with code {code}; restart in {delay:.0f}s:\n{last}")


@contextmanager
def kept(
    stack: Stack, log_dir: Path, listen: str, report: Callable[[str], None]
) -> Iterator[tuple[tuple[str, str], ConsoleWatch | None]]:
    """``beside``, for ``lockstep up``: also the ``ConsoleWatch`` that keeps it running (None
    when ``listen`` is ``off``); the process running when the block ends is stopped."""
    if listen == "off":
        yield ("console", "off (--console off)"), None
        return
    log_path = log_dir / "console.log"
    watch = ConsoleWatch(
        lambda: start_console(stack, log_dir, listen)[0], log_path, report, now=time.monotonic()
    )
    try:
        where = f"http://{listen}" if serving(watch.proc, log_path) else "not serving: see its log"
        yield ("console (reader)", f"{where}  (log {log_path})"), watch
    finally:
        stop(watch.proc, signal.SIGTERM, timeout_s=5)


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


def serving(proc: subprocess.Popen[bytes], log_path: Path, timeout_s: float = READY_S) -> bool:
    """Whether this process says it is bound (its ``console serving (pid N)`` line in its log)
    before it exits or ``timeout_s`` passes. Not whether the port answers: another listener
    there (an earlier console, anything) would answer while this one fails to bind."""
    said = f"console serving (pid {proc.pid})"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        exited = proc.poll() is not None
        with contextlib.suppress(OSError):
            if said in log_path.read_text(errors="replace"):
                return not exited
        if exited:
            return False
        time.sleep(0.1)  # polling a condition (the log), not standing in for one
    return False
