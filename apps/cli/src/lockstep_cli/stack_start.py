"""What the commands that start servers (``up``, ``demo``, ``bench rollout``) refuse in one
line: a data directory they cannot use, a server or service that would not start."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from lockstep_cli.cli_io import fail

if TYPE_CHECKING:
    from lockstep_devstack.stack import Stack


def usable_data_dir(data_dir: Path) -> None:
    """Create ``data_dir`` if missing; one that cannot be created or written is one line."""
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        fail(f"--data-dir {data_dir}: {exc.strerror or exc}")
    if not os.access(data_dir, os.W_OK | os.X_OK):
        fail(f"--data-dir {data_dir}: not writable by this user")


@contextlib.contextmanager
def start_refusals_are_one_line() -> Iterator[None]:
    """What stops the stack from starting is one line, never a traceback: a data directory
    whose PostgreSQL cluster cannot be used safely (made by an older version without
    passwords, or its password files lost), or a server or service that exited while
    starting (a port in use, a bad setting), named with its reason and its log, exit 2; a
    configuration the servers refuse, exit 3; a server or service that would not start
    otherwise (not ready in time), its reason, exit 1."""
    from lockstep_common.errors import ConfigurationError
    from lockstep_devstack.postgres import ClusterRefused
    from lockstep_devstack.process import StartFailed

    try:
        yield
    except typer.Exit:
        raise  # a command's own exit code (click's Exit is a RuntimeError: not a start failure)
    except (ClusterRefused, StartFailed) as exc:
        fail(str(exc))
    except ConfigurationError as exc:  # e.g. a stream limit the server cannot reserve
        fail(str(exc), code=3)
    except (RuntimeError, TimeoutError) as exc:  # a server or service that would not start
        fail(str(exc), code=1)


def chosen_services(names: list[str] | None) -> list[str]:
    """The services ``--service`` names, every one when none: ``up`` and ``topology apply``
    alike refuse an unknown name in one line naming the choices."""
    from lockstep_common.identities import SERVICE_NAMES

    chosen = names or list(SERVICE_NAMES)
    unknown = sorted(set(chosen) - set(SERVICE_NAMES))
    if unknown:
        fail(f"unknown service(s) {', '.join(unknown)}; choose from {', '.join(SERVICE_NAMES)}")
    return chosen


@contextlib.contextmanager
def bench_servers() -> Iterator[tuple[str, str]]:
    """(NATS URL, database URL) for a benchmark: LOCKSTEP_NATS_URL / LOCKSTEP_DATABASE_URL when
    set, else embedded servers in a temporary directory removed afterwards."""
    from lockstep_devstack import Stack

    data_dir = Path(tempfile.mkdtemp(prefix="lockstep-bench-"))
    data_dir.chmod(0o755)
    try:
        with Stack(
            data_dir,
            nats_url=os.environ.get("LOCKSTEP_NATS_URL"),
            database_url=os.environ.get("LOCKSTEP_DATABASE_URL"),
            durable=False,
        ) as servers:
            yield servers.urls()
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


CONVENTIONAL_PORTS = (("NATS", 4222), ("PostgreSQL", 5432))


def started_servers(stack: Stack) -> dict[str, str]:
    """The URL of each server ``up`` started itself (not one the environment named)."""
    found = {}
    if stack.nats is not None and stack.nats_url:
        found["NATS"] = str(stack.nats_url)
    if stack.postgres is not None and stack.database_url:
        found["PostgreSQL"] = str(stack.database_url)
    return found


def moved_ports(started: dict[str, str]) -> str | None:
    """One line naming each embedded server (name -> its URL, only those ``up`` started) that
    is not on its conventional port because that port was taken, or None when none moved: a
    client pointed at 4222 or 5432 would otherwise reach another program, or nothing."""
    from urllib.parse import urlparse

    moved = []
    for name, usual in CONVENTIONAL_PORTS:
        url = started.get(name)
        if url is None:
            continue
        port = urlparse(url.split(",")[0]).port
        if port is not None and port != usual:
            moved.append(f"{name} on {port} ({usual} was taken)")
    if not moved:
        return None
    return f"note: {', '.join(moved)}; stack.json and `lockstep env` have the ports in use"
