"""In-band commands on a real host: install the driver package at an exact version, rebuild
DKMS, reboot; each run at most once, and only for the work item that holds the fence.

Reached over the bus (``node.command``: ``lockstep_agent.command_channel``) and from a file
(``lockstep-agent command FILE``). Its contract, whatever carries the command:

- **Once per id.** Every command is journaled on disk before anything runs (``started``) and
  its outcome after; a command whose id is in the journal is answered from it and never run
  again. One that was started and has no outcome (the agent died while it ran) is answered
  ``interrupted``, not run again: whether it completed is for the updater's readback to say.
  The same id with a different request is refused.
- **Fencing.** The agent keeps, per work item, the highest fencing token it accepted; a command
  with a lower one comes from a holder whose lease lapsed and is refused (the resource checks
  the token, as fencing tokens require: Kleppmann, "How to do distributed locking", 2016).
- **The attested bytes only.** ``install-driver`` downloads the exact ``package=version`` into
  a private directory, checks the file's SHA-256 against the command's (the digest the attested
  bundle names), and installs that file, not whatever the repository serves later; a mismatch
  is refused and nothing is installed. apt (Debian, Ubuntu) and dnf (RHEL family).
- **Reads change nothing.** ``read-state`` answers the node's in-band state (``NodeReading``,
  from the ``reader`` the agent was given: its probes, or the simulator's model); it is neither
  journaled nor fenced, so a read never burns an id nor moves a fence.
- ``dry_run``: nothing is run or journaled; the outcome lists what would be run.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal, Protocol

from lockstep_common.events.v1 import NodeCommandAnswered, NodeCommandRequested, NodeReading

Status = Literal["done", "failed", "refused", "interrupted", "dry-run"]
TIMEOUT_S = 1800.0
COMMAND_JOURNAL = "commands.sqlite"  # in the agent's data_dir

# The one protocol definition, shared with the updater that sends these over NATS
# (``node.command`` in the event catalogue; ``lockstep_agent.command_channel`` answers them).
InbandCommand = NodeCommandRequested
Outcome = NodeCommandAnswered
Reader = Callable[[], NodeReading]
"""Reads the node's in-band state now (``OSError`` / ``ValueError`` when it cannot)."""


class Host(Protocol):
    """Runs a program on the node: argv (never a shell string) -> (exit status, output)."""

    def run(self, argv: Sequence[str], cwd: Path | None = None) -> tuple[int, str]: ...


class RealHost:
    """This machine."""

    def run(self, argv: Sequence[str], cwd: Path | None = None) -> tuple[int, str]:
        try:
            done = subprocess.run(
                list(argv),
                cwd=cwd,
                capture_output=True,
                text=True,
                timeout=TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return 127, str(exc)
        return done.returncode, (done.stdout + done.stderr).strip()


def package_manager() -> Literal["apt", "dnf"] | None:
    """The distribution's package manager, if it is one this agent drives."""
    if shutil.which("apt-get"):
        return "apt"
    if shutil.which("dnf"):
        return "dnf"
    return None


def _download(manager: str, package: str, version: str) -> tuple[str, ...]:
    if manager == "apt":
        return ("apt-get", "download", f"{package}={version}")
    return ("dnf", "download", f"{package}-{version}")


def _install(manager: str, file: Path) -> tuple[str, ...]:
    # A path to the file, so the package manager installs these bytes, resolving only its
    # dependencies from the repositories.
    if manager == "apt":
        return ("apt-get", "install", "-y", "--no-install-recommends", str(file))
    return ("dnf", "install", "-y", str(file))


_SCHEMA = """
CREATE TABLE IF NOT EXISTS journal (
    command_id TEXT PRIMARY KEY,
    request    TEXT NOT NULL,
    outcome    TEXT
);
CREATE TABLE IF NOT EXISTS fences (work_item TEXT PRIMARY KEY, token INTEGER NOT NULL);
"""


class Executor:
    """Carries out ``InbandCommand``s (see the module docstring).

    Args:
        journal: the journal's SQLite file (mode 0600).
        host: where programs run.
        manager: the package manager (default: detected).
        reader: what answers ``read-state`` (None: refused, naming why).
    """

    def __init__(
        self,
        journal: Path,
        host: Host | None = None,
        manager: str | None = None,
        reader: Reader | None = None,
    ) -> None:
        journal.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not journal.exists():
            os.close(os.open(journal, os.O_WRONLY | os.O_CREAT, 0o600))
        # One caller at a time (the command channel awaits each command), from a worker thread.
        self._db = sqlite3.connect(journal, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)
        self._host = host or RealHost()
        self._manager = manager or package_manager()
        self._reader = reader

    def close(self) -> None:
        self._db.close()

    def execute(self, cmd: InbandCommand, *, dry_run: bool = False) -> Outcome:
        """Carry out ``cmd`` once (see the module docstring); never raises for a refusal."""
        if cmd.action == "read-state":
            return self._read(cmd)
        return self._once(cmd, dry_run=dry_run)

    def _once(self, cmd: InbandCommand, *, dry_run: bool) -> Outcome:
        request = cmd.model_dump_json()
        row = self._db.execute(
            "SELECT request, outcome FROM journal WHERE command_id = ?", (cmd.command_id,)
        ).fetchone()
        if row is not None:
            if row[0] != request:
                return self._refused(cmd, "command id already used for another request")
            if row[1] is None:
                return Outcome(
                    command_id=cmd.command_id,
                    status="interrupted",
                    detail="started before and never finished (the agent stopped): not run "
                    "again; the updater's readback says what the node runs",
                )
            return Outcome.model_validate_json(row[1])
        refusal = self._check(cmd)
        if refusal is not None:
            return self._refused(cmd, refusal)
        if dry_run:
            return Outcome(command_id=cmd.command_id, status="dry-run", ran=self._plan(cmd))
        self._start(cmd, request)
        outcome = self._run(cmd)
        self._db.execute(
            "UPDATE journal SET outcome = ? WHERE command_id = ?",
            (outcome.model_dump_json(), cmd.command_id),
        )
        return outcome

    def _read(self, cmd: InbandCommand) -> Outcome:
        if self._reader is None:
            return self._refused(cmd, "this agent reads no in-band state (no reader configured)")
        try:
            state = self._reader()
        except (OSError, ValueError) as exc:
            return Outcome(command_id=cmd.command_id, status="failed", detail=f"read: {exc}")
        return Outcome(command_id=cmd.command_id, status="done", state=state)

    def _check(self, cmd: InbandCommand) -> str | None:
        row = self._db.execute(
            "SELECT token FROM fences WHERE work_item = ?", (cmd.work_item,)
        ).fetchone()
        if row is not None and cmd.fencing_token < int(row[0]):
            return (
                f"fencing token {cmd.fencing_token} of work item {cmd.work_item} has lapsed "
                f"(token {row[0]} was seen)"
            )
        if cmd.action == "install-driver":
            if cmd.package is None or cmd.version is None or cmd.package_sha256 is None:
                return "install-driver needs package, version and package_sha256"
            if self._manager is None:
                return "no package manager this agent drives (apt-get, dnf) on this node"
        return None

    def _start(self, cmd: InbandCommand, request: str) -> None:
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        db.execute(
            "INSERT INTO fences (work_item, token) VALUES (?, ?) ON CONFLICT (work_item) "
            "DO UPDATE SET token = max(token, excluded.token)",
            (cmd.work_item, cmd.fencing_token),
        )
        db.execute(
            "INSERT INTO journal (command_id, request, outcome) VALUES (?, ?, NULL)",
            (cmd.command_id, request),
        )
        db.execute("COMMIT")

    def _refused(self, cmd: InbandCommand, why: str) -> Outcome:
        return Outcome(command_id=cmd.command_id, status="refused", detail=why)

    def _plan(self, cmd: InbandCommand) -> tuple[tuple[str, ...], ...]:
        if cmd.action == "install-driver":
            assert cmd.package is not None and cmd.version is not None  # noqa: S101 - _check
            manager = self._manager or "apt"
            return (
                _download(manager, cmd.package, cmd.version),
                ("sha256", f"<downloaded file> == {cmd.package_sha256}"),
                _install(manager, Path("<downloaded file>")),
            )
        if cmd.action == "rebuild-dkms":
            return (("dkms", "autoinstall"),)
        return (("systemctl", "reboot"),)

    def _run(self, cmd: InbandCommand) -> Outcome:
        if cmd.action == "install-driver":
            return self._install_driver(cmd)
        (argv,) = self._plan(cmd)
        rc, out = self._host.run(argv)
        status: Status = "done" if rc == 0 else "failed"
        detail = "" if rc == 0 else f"{argv[0]} exited {rc}: {out[-500:]}"
        return Outcome(command_id=cmd.command_id, status=status, detail=detail, ran=(argv,))

    def _install_driver(self, cmd: InbandCommand) -> Outcome:
        assert cmd.package and cmd.version and cmd.package_sha256  # noqa: S101 - _check did
        assert self._manager is not None  # noqa: S101 - _check did
        ran: list[tuple[str, ...]] = []
        with tempfile.TemporaryDirectory(prefix="lockstep-agent-pkg-") as work:
            where = Path(work)
            fetch = _download(self._manager, cmd.package, cmd.version)
            ran.append(fetch)
            rc, out = self._host.run(fetch, cwd=where)
            files = sorted(p for p in where.iterdir() if p.is_file())
            if rc != 0 or len(files) != 1:
                return Outcome(
                    command_id=cmd.command_id,
                    status="failed",
                    ran=tuple(ran),
                    detail=f"download of {cmd.package} {cmd.version} failed: {out[-500:]}",
                )
            digest = hashlib.sha256(files[0].read_bytes()).hexdigest()
            if digest != cmd.package_sha256:
                return Outcome(
                    command_id=cmd.command_id,
                    status="refused",
                    ran=tuple(ran),
                    detail=f"{files[0].name} has SHA-256 {digest}, not the attested "
                    f"{cmd.package_sha256}: not installed",
                )
            install = _install(self._manager, files[0])
            ran.append(install)
            rc, out = self._host.run(install, cwd=where)
        if rc != 0:
            return Outcome(
                command_id=cmd.command_id,
                status="failed",
                ran=tuple(ran),
                detail=f"install exited {rc}: {out[-500:]}",
            )
        return Outcome(command_id=cmd.command_id, status="done", ran=tuple(ran))


def load_command(text: str) -> InbandCommand:
    """A command from its JSON (ValueError naming what is wrong)."""
    return InbandCommand.model_validate(json.loads(text))
