"""An embedded PostgreSQL from the ``pgserver`` wheel's binaries, run as our own child.

We use the wheel only for its PostgreSQL 16 build: starting ``postgres`` ourselves (rather than
through pgserver's ``pg_ctl`` daemon) keeps it in our process tree, on a TCP loopback port, and
stopped when we stop. PostgreSQL refuses to run as root; as root we run it as an unprivileged
system user, created on first use as pgserver itself does, with that user's own group and no
supplementary groups (see ``process.run_as``).

That user must reach both the binaries and the cluster. A clone under root's private home
(``/root`` is 0700 or 0701, a ``mktemp -d`` under it 0700) keeps the wheel's binaries out of its
reach. Rather than open the user's private directories to every local user, we then run
``initdb`` and ``postgres`` from a copy inside the data directory, which we set up anyway. Only
the cluster's path must be entered: a parent directory the service user cannot enter gets the
one search bit that lets it (never read, so nothing can be listed), and each change is logged
as a warning naming the directory, since it may be the user's own. The tests and the demo keep
their data under ``/tmp``, so they change nothing of the user's.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import pwd
import shutil
import signal
import stat
import subprocess
from pathlib import Path

from lockstep_devstack.process import free_port, port_open, run_as, spawn, stop, tail, wait_until

SERVICE_USER = "lockstep-pg"
_log = logging.getLogger(__name__)


def postgres_bin_dir() -> Path:
    """The directory holding ``initdb`` and ``postgres`` inside the pgserver wheel."""
    # find_spec locates the package without importing it: pgserver's own __init__ sets up
    # locks and runtime directories we do not use.
    spec = importlib.util.find_spec("pgserver")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("PostgreSQL binaries not found: install the pgserver wheel")
    path = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
    if not (path / "postgres").exists():
        raise FileNotFoundError(f"PostgreSQL binaries not found under {path}: install pgserver")
    return path


def _service_user() -> str | None:
    """None when we are not root; else an unprivileged user to run PostgreSQL as."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(SERVICE_USER)
    except KeyError:
        useradd = shutil.which("useradd") or "/usr/sbin/useradd"
        subprocess.run(
            [useradd, "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", SERVICE_USER],
            check=True,
            capture_output=True,
        )
    return SERVICE_USER


def _search_bit(st: os.stat_result, account: pwd.struct_passwd) -> int:
    """The bit that decides whether ``account`` (its primary group only, as ``run_as`` starts
    it) may enter a directory: the first class it belongs to, owner, group or others, decides,
    so a group match with no group bit denies even when others may enter."""
    if st.st_uid == account.pw_uid:
        return stat.S_IXUSR
    if st.st_gid == account.pw_gid:
        return stat.S_IXGRP
    return stat.S_IXOTH


def _make_traversable(path: Path, user: str) -> None:
    """Let ``user`` enter every parent of ``path``: add, where it is missing, only the search
    bit of the class it falls in, and log each directory so changed."""
    account = pwd.getpwnam(user)
    for parent in reversed(path.resolve().parents):
        st = parent.stat()
        bit = _search_bit(st, account)
        if not st.st_mode & bit:
            parent.chmod(stat.S_IMODE(st.st_mode) | bit)
            _log.warning(
                "PostgreSQL runs as %s, which could not enter %s: added its search permission "
                "(mode %04o -> %04o)",
                user,
                parent,
                stat.S_IMODE(st.st_mode),
                stat.S_IMODE(st.st_mode) | bit,
            )


def _runs_as(user: str, bin_dir: Path) -> bool:
    """Whether ``user`` can execute the ``postgres`` in ``bin_dir`` (its path and libraries)."""
    try:
        probe = subprocess.run(
            [str(bin_dir / "postgres"), "--version"],
            capture_output=True,
            check=False,
            timeout=30,
            **run_as(user),
        )
    except PermissionError:
        return False
    return probe.returncode == 0


def _copy_install(bin_dir: Path, target: Path) -> Path:
    """A copy of what ``initdb`` and ``postgres`` need from the pgserver wheel owning
    ``bin_dir``, at ``target`` (kept while the source is unchanged); returns the copy's ``bin``.

    The layout is the wheel's, from site-packages down: PostgreSQL finds ``share`` and ``lib``
    relative to its executable, and ``initdb`` loads the wheel's ``libpq`` through the RPATH
    ``$ORIGIN/../../../pgserver.libs``. The service user owns the data directory and so could
    swap the copy, which changes only what runs as that user: nothing in it is run as root.
    """
    install = bin_dir.parent  # site-packages/pgserver/pginstall
    package = install.parent
    site = package.parent
    stamp = f"{install}\n{(bin_dir / 'postgres').stat().st_mtime_ns}\n"
    marker = target / ".copied-from"
    copied_bin = target / bin_dir.relative_to(site)
    if marker.is_file() and marker.read_text() == stamp:
        return copied_bin
    shutil.rmtree(target, ignore_errors=True)
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    into = staging / install.relative_to(site)
    (into / "bin").mkdir(parents=True)
    for name in ("initdb", "postgres"):
        shutil.copy2(bin_dir / name, into / "bin" / name)
    skip = shutil.ignore_patterns("*.a", "pkgconfig")  # static libraries: only for building
    shutil.copytree(install / "lib", into / "lib", symlinks=True, ignore=skip)
    shutil.copytree(install / "share", into / "share", symlinks=True)
    libs = site / f"{package.name}.libs"
    if libs.is_dir():
        shutil.copytree(libs, staging / libs.name, symlinks=True)
    (staging / ".copied-from").write_text(stamp)
    staging.rename(target)  # a copy interrupted half-way is never taken for a whole one
    return copied_bin


class PostgresServer:
    """A PostgreSQL child process with its cluster under ``data_dir/pgdata``.

    Args:
        data_dir: where the cluster and the log live (kept across restarts).
        port: TCP port on 127.0.0.1 (None: 5432 if free, else any free port).
        durable: fsync as usual; tests pass False to skip fsync (crash-safety of PostgreSQL
            itself is not what they test).
    """

    def __init__(self, data_dir: Path, *, port: int | None = None, durable: bool = True) -> None:
        self.data_dir = data_dir
        self.port = port or free_port(5432)
        self.durable = durable
        self.proc: subprocess.Popen[bytes] | None = None
        self.user = _service_user()
        self.bin_dir: Path | None = None  # where initdb and postgres run from, set by start()

    @property
    def pgdata(self) -> Path:
        """The cluster directory."""
        return self.data_dir / "pgdata"

    @property
    def log_path(self) -> Path:
        """The server's log file."""
        return self.data_dir / "postgres.log"

    def dsn(self, database: str = "lockstep") -> str:
        """A DSN for ``database`` as the ``postgres`` superuser (trust auth on loopback)."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def _prepare(self) -> Path:
        """Make the data directory and, as root, let the service user reach it and the binaries;
        returns the directory to run ``initdb`` and ``postgres`` from."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.pgdata.mkdir(mode=0o700, exist_ok=True)
        bin_dir = postgres_bin_dir()
        if self.user is None:
            return bin_dir
        _make_traversable(self.pgdata, self.user)
        shutil.chown(self.data_dir, self.user)
        shutil.chown(self.pgdata, self.user)
        if _runs_as(self.user, bin_dir):
            return bin_dir
        return _copy_install(bin_dir, self.data_dir / "pginstall")

    def _initdb(self, bin_dir: Path) -> None:
        if (self.pgdata / "PG_VERSION").exists():
            return
        argv = [
            str(bin_dir / "initdb"),
            "-D",
            str(self.pgdata),
            "-U",
            "postgres",
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
        ]
        if not self.durable:
            argv.append("--no-sync")
        result = subprocess.run(argv, capture_output=True, check=False, **run_as(self.user))
        if result.returncode != 0:
            raise RuntimeError(f"initdb failed: {result.stderr.decode(errors='replace')}")

    def start(self, timeout_s: float = 60.0) -> None:
        """Initialise the cluster if new, start, and create the ``lockstep`` database."""
        self.bin_dir = self._prepare()
        self._initdb(self.bin_dir)
        if self.user:
            with contextlib.suppress(FileNotFoundError):
                shutil.chown(self.log_path, self.user)
        argv = [
            str(self.bin_dir / "postgres"),
            "-D",
            str(self.pgdata),
            "-p",
            str(self.port),
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            f"unix_socket_directories={self.pgdata}",
            "-c",
            "max_connections=300",
            "-c",
            "shared_buffers=128MB",
        ]
        if not self.durable:
            argv += [
                "-c",
                "fsync=off",
                "-c",
                "synchronous_commit=off",
                "-c",
                "full_page_writes=off",
            ]
        self.proc = spawn(
            argv, log_path=self.log_path, user=self.user, parent_death_signal=signal.SIGINT
        )
        wait_until(
            lambda: port_open("127.0.0.1", self.port) and self._accepts(),
            timeout_s=timeout_s,
            what="PostgreSQL",
            proc=self.proc,
            log_path=self.log_path,
        )
        self._create_database("lockstep")

    def _psql(self, sql: str, database: str = "postgres") -> subprocess.CompletedProcess[bytes]:
        # As ourselves, from the wheel: never a binary in the data directory, which the service
        # user owns and could replace.
        argv = [
            str(postgres_bin_dir() / "psql"),
            "-X",
            "-q",
            "-v",
            "ON_ERROR_STOP=1",
            "-At",
            "-h",
            "127.0.0.1",
            "-p",
            str(self.port),
            "-U",
            "postgres",
            "-d",
            database,
            "-c",
            sql,
        ]
        return subprocess.run(argv, capture_output=True, check=False, timeout=30)

    def _accepts(self) -> bool:
        return self._psql("SELECT 1").returncode == 0

    def _create_database(self, name: str) -> None:
        exists = self._psql(f"SELECT 1 FROM pg_database WHERE datname = '{name}'")
        if exists.stdout.strip() == b"1":
            return
        result = self._psql(f'CREATE DATABASE "{name}"')
        if result.returncode != 0:
            raise RuntimeError(
                f"cannot create database {name}: {result.stderr.decode()}\n{tail(self.log_path)}"
            )

    def stop(self) -> None:
        """Fast shutdown (SIGINT: roll back open transactions, checkpoint, exit)."""
        if self.proc is not None:
            stop(self.proc, signal.SIGINT, timeout_s=30)
            self.proc = None
