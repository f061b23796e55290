"""Child-process helpers shared by the embedded servers."""

from __future__ import annotations

import contextlib
import ctypes
import os
import pwd
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

PR_SET_PDEATHSIG = 1
# What a server child needs of our environment: where programs and temporary files are, and
# the locale and time zone its messages are written in. Nothing else: an operator's shell may
# hold secrets (a BMC password exported for a service's `env:` reference), and a server child
# has no use for them (issue 26). A service child is given its own environment explicitly.
SERVER_ENVIRONMENT = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "LC_MESSAGES", "TZ", "TMPDIR")


def server_env(**extra: str) -> dict[str, str]:
    """The environment of a server child: ``SERVER_ENVIRONMENT`` from ours, plus ``extra``."""
    return {k: os.environ[k] for k in SERVER_ENVIRONMENT if k in os.environ} | extra


class StartFailed(RuntimeError):
    """A server exited while starting: one line with its reason and where its log is."""


def run_as(user: str | None) -> dict[str, Any]:
    """``subprocess`` keywords that run a child as ``user`` with that user's primary group and
    no supplementary groups (None: as ourselves).

    ``user=`` alone changes only the uid: a child started by root keeps gid 0 and root's groups,
    so a server would run in group root, and a directory such as a mode-0701 ``/root`` would be
    judged by its group bits (none) rather than the others' search bit.
    """
    if user is None:
        return {}
    return {"user": user, "group": pwd.getpwnam(user).pw_gid, "extra_groups": []}


def free_port(preferred: int | None = None, host: str = "127.0.0.1") -> int:
    """``preferred`` if it is free on ``host``, else any free port."""
    for candidate in ([preferred] if preferred else []) + [0]:
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((host, candidate))
            except OSError:
                continue
            return int(sock.getsockname()[1])
    raise OSError("no free port")


def _die_with_parent(sig: int) -> Callable[[], None] | None:
    """A preexec hook: the child gets ``sig`` when we die, even by SIGKILL (Linux only).

    None off the main thread: prctl(2) ties the signal to the *thread* that forked the child,
    so a server started from a worker thread (``asyncio.to_thread``, a thread pool) would be
    stopped when that thread ends, with the process still running and relying on it (the
    messaging fault tests lost a restarted NATS server that way). Such a child is stopped
    explicitly instead."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def hook() -> None:
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, sig)

    return hook


def spawn(
    argv: list[str],
    *,
    log_path: Path,
    parent_death_signal: int,
    user: str | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start a server in its own process group, logging to ``log_path``.

    Its own process group keeps a terminal's Ctrl-C from reaching it before we have stopped
    the services that use it; ``parent_death_signal`` stops it if we are killed outright.
    ``env`` None: ``server_env()``, never our whole environment.
    """
    log = log_path.open("ab")
    try:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            process_group=0,
            env=server_env() if env is None else env,
            **run_as(user),
            preexec_fn=_die_with_parent(parent_death_signal),  # noqa: PLW1509 - no threads yet
        )
    finally:
        log.close()


def stop(proc: subprocess.Popen[bytes], sig: int, timeout_s: float = 20.0) -> None:
    """Signal, wait, and kill if it does not exit in time."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, sig)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)


def wait_until(
    check: Callable[[], bool],
    *,
    timeout_s: float,
    what: str,
    proc: subprocess.Popen[bytes],
    log_path: Path,
) -> None:
    """Poll ``check`` until true; fail with the server's log tail if it exits or times out."""
    deadline = time.monotonic() + timeout_s
    delay = 0.02
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise StartFailed(
                f"{what} exited with code {proc.returncode} while starting: "
                f"{reason(log_path)} (log {log_path})"
            )
        if check():
            return
        time.sleep(delay)
        delay = min(delay * 1.5, 0.25)
    raise TimeoutError(f"{what} not ready after {timeout_s:.0f}s:\n{tail(log_path)}")


def reason(path: Path) -> str:
    """Why a server stopped, from its log: the last line that says an address is in use (the
    port is named by the caller's ``what``), else the last line naming an error, else the
    last line."""
    lines = [line.strip() for line in tail(path, 40).splitlines() if line.strip()]
    for marker in ("in use", "FATAL", "[FTL]", "ERROR", "[ERR]"):
        found = [line for line in lines if marker.lower() in line.lower()]
        if found:
            return found[-1]
    return lines[-1] if lines else "(empty log)"


def tail(path: Path, lines: int = 20) -> str:
    """The last lines of a log file, for error messages."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def port_open(host: str, port: int) -> bool:
    """True when something accepts TCP connections on host:port."""
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex((host, port)) == 0
