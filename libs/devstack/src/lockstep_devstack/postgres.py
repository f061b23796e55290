"""An embedded PostgreSQL from the ``pgserver`` wheel's binaries, run as our own child.

We use the wheel only for its PostgreSQL 16 build: starting ``postgres`` ourselves (rather than
through pgserver's ``pg_ctl`` daemon) keeps it in our process tree, on a TCP loopback port, and
stopped when we stop. PostgreSQL refuses to run as root; as root we run it as an unprivileged
system user, created on first use as pgserver itself does.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pwd
import shutil
import signal
import subprocess
from pathlib import Path

from lockstep_devstack.process import free_port, port_open, spawn, stop, tail, wait_until

SERVICE_USER = "lockstep-pg"


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


def _make_traversable(path: Path, user: str) -> None:
    """Let ``user`` enter every parent of ``path`` (adds only the search bit, as pgserver does)."""
    uid = pwd.getpwnam(user).pw_uid
    for parent in path.resolve().parents:
        st = parent.stat()
        if st.st_uid != uid and not st.st_mode & 0o001:
            parent.chmod(st.st_mode | 0o001)


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

    def _initdb(self) -> None:
        if (self.pgdata / "PG_VERSION").exists():
            return
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.pgdata.mkdir(mode=0o700, exist_ok=True)
        if self.user:
            _make_traversable(self.pgdata, self.user)
            shutil.chown(self.data_dir, self.user)
            shutil.chown(self.pgdata, self.user)
        argv = [
            str(postgres_bin_dir() / "initdb"),
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
        result = subprocess.run(argv, capture_output=True, user=self.user, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"initdb failed: {result.stderr.decode(errors='replace')}")

    def start(self, timeout_s: float = 60.0) -> None:
        """Initialise the cluster if new, start, and create the ``lockstep`` database."""
        self._initdb()
        if self.user:
            with contextlib.suppress(FileNotFoundError):
                shutil.chown(self.log_path, self.user)
        argv = [
            str(postgres_bin_dir() / "postgres"),
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
