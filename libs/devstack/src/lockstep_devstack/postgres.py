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

Authentication is SCRAM-SHA-256 for every connection, TCP and the Unix socket alike; no
``trust`` line exists, so a client must hold a role's password (``pgpass``). Roles:

- ``postgres``, the bootstrap superuser: used only here, to create the admin and the database;
- ``lockstep_admin`` (CREATEROLE, owner of the ``lockstep`` database, not a superuser): creates
  each service's role and schema (:meth:`PostgresServer.provision`), runs migrations as the
  schema's owner, and is what the test suite and operators' commands connect as;
- ``lockstep_<identity>``, one per service: owns the schema of the same name, may connect to
  ``lockstep`` and nothing else; another service's schema is not even visible to it (no USAGE).

A cluster made by an older version, with ``trust`` authentication, is refused with one line
(:class:`ClusterRefused`) rather than migrated: its tables belong to the superuser, and the
embedded cluster holds only local development state.
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
from urllib.parse import quote

from lockstep_devstack.pgpass import (
    check_identity,
    ensure_password,
    passfile_path,
    scram_verifier,
)
from lockstep_devstack.process import (
    StartFailed,
    free_port,
    port_open,
    run_as,
    server_env,
    spawn,
    stop,
    tail,
    wait_until,
)

SERVICE_USER = "lockstep-pg"
SUPERUSER = "postgres"
ADMIN_ROLE = "lockstep_admin"
DATABASE = "lockstep"
# Identities whose password files are the servers' own, never a service's.
SUPERUSER_IDENTITY = "superuser"
ADMIN_IDENTITY = "admin"
_RESERVED = frozenset({SUPERUSER_IDENTITY, ADMIN_IDENTITY})
# The first line of the pg_hba.conf we write; a cluster without it predates passwords.
HBA_MARKER = "# lockstep-devstack: SCRAM-SHA-256 only"
HBA = f"""{HBA_MARKER} (no trust, no peer): every client needs a role's password.
# TYPE  DATABASE  USER  ADDRESS       METHOD
local   all       all                 scram-sha-256
host    all       all   127.0.0.1/32  scram-sha-256
"""
_log = logging.getLogger(__name__)


PORT_ATTEMPTS = 3


def _port_taken(exc: StartFailed) -> bool:
    return "in use" in str(exc).lower()


class ClusterRefused(RuntimeError):
    """The cluster in the data directory cannot be used safely; the message says why and what
    to do, in one line."""


def role_of(identity: str) -> str:
    """The PostgreSQL role of an identity: ``postgres`` and ``lockstep_admin`` for the servers'
    own, ``lockstep_<identity>`` for a service (``inventory`` -> ``lockstep_inventory``)."""
    own = {SUPERUSER_IDENTITY: SUPERUSER, ADMIN_IDENTITY: ADMIN_ROLE}
    return own.get(identity) or f"lockstep_{check_identity(identity)}"


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
            env=server_env(),
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
        secrets_dir: where the roles' password files live; not below ``data_dir``, which
            PostgreSQL's service user owns when we are root.
        port: TCP port on 127.0.0.1 (None: 5432 if free, else any free port).
        durable: fsync as usual; tests pass False to skip fsync (crash-safety of PostgreSQL
            itself is not what they test).
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        secrets_dir: Path,
        port: int | None = None,
        durable: bool = True,
    ) -> None:
        self.data_dir = data_dir
        self.secrets_dir = secrets_dir.resolve()
        self.port = port or free_port(5432)
        self._port_chosen = port is None  # ours to change if another server takes it first
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

    def passfile(self, identity: str) -> Path:
        """The password file of ``identity`` (``superuser``, ``admin`` or a service)."""
        return passfile_path(self.secrets_dir, identity)

    def dsn(self, identity: str = ADMIN_IDENTITY, database: str = DATABASE) -> str:
        """A DSN for ``database`` as ``identity`` (the admin by default). It names the
        identity's password file (libpq's ``passfile`` parameter, which asyncpg and psql both
        read), never the password."""
        role = role_of(identity)
        passfile = quote(str(self.passfile(identity)), safe="/")
        return f"postgresql://{role}@127.0.0.1:{self.port}/{database}?passfile={passfile}"

    def _prepare(self) -> Path:
        """Make the data directory and, as root, let the service user reach it and the binaries;
        returns the directory to run ``initdb`` and ``postgres`` from."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.pgdata.mkdir(mode=0o700, exist_ok=True)
        bin_dir = postgres_bin_dir()
        if self.user is None:
            return bin_dir
        # The service user owns data_dir, so it could have put a link where pgdata or the
        # copied binaries go, pointing root's chown, rmtree or copies at any file.
        for path in (self.pgdata, self.data_dir / "pginstall", self.data_dir / "pginstall.partial"):
            if path.is_symlink():
                raise ClusterRefused(
                    f"{path} is a symbolic link: refusing to use it as root (remove it; the "
                    f"PostgreSQL user {self.user} may have made it)"
                )
        _make_traversable(self.pgdata, self.user)
        uid = pwd.getpwnam(self.user).pw_uid
        for path in (self.data_dir, self.pgdata):
            os.chown(path, uid, -1, follow_symlinks=False)
        if _runs_as(self.user, bin_dir):
            return bin_dir
        return _copy_install(bin_dir, self.data_dir / "pginstall")

    def _initdb(self, bin_dir: Path) -> None:
        if (self.pgdata / "PG_VERSION").exists():
            self._check_existing()
            return
        superuser = self.passfile(SUPERUSER_IDENTITY)
        superuser.unlink(missing_ok=True)  # a new cluster gets a new password
        password = ensure_password(superuser, SUPERUSER)
        # initdb reads the password from a file (never argv); it runs as the service user
        # when we are root, so the file is that user's, in its data directory, and removed
        # right after.
        pwfile = self.data_dir / ".initdb-password"
        self._write_owned(pwfile, f"{password}\n")
        argv = [
            str(bin_dir / "initdb"),
            "-D",
            str(self.pgdata),
            "-U",
            SUPERUSER,
            f"--pwfile={pwfile}",
            "--auth=scram-sha-256",
            "--encoding=UTF8",
            "--locale=C",
        ]
        if not self.durable:
            argv.append("--no-sync")
        try:
            result = subprocess.run(
                argv, capture_output=True, check=False, env=server_env(), **run_as(self.user)
            )
        finally:
            pwfile.unlink(missing_ok=True)
        if result.returncode != 0:
            raise RuntimeError(f"initdb failed: {result.stderr.decode(errors='replace')}")
        self._write_hba()

    def _check_existing(self) -> None:
        """Refuse a cluster we cannot log in to, or one made before passwords (trust)."""
        hba = self.pgdata / "pg_hba.conf"
        try:
            first = hba.read_text(errors="replace").partition("\n")[0]
        except OSError:
            first = ""
        if not first.startswith(HBA_MARKER):
            raise ClusterRefused(
                f"the PostgreSQL cluster in {self.pgdata} was created by an older Lockstep "
                "with password-less (trust) authentication and is not migrated: remove "
                f"{self.data_dir} (its data is lost) or use another --data-dir"
            )
        if not self.passfile(SUPERUSER_IDENTITY).is_file():
            raise ClusterRefused(
                f"the PostgreSQL cluster in {self.pgdata} has no superuser password file at "
                f"{self.passfile(SUPERUSER_IDENTITY)}, so nothing can log in to it: restore that "
                f"file, or remove {self.data_dir} (its data is lost)"
            )
        self._write_hba()  # ours, whatever it was edited to since

    def _write_hba(self) -> None:
        hba = self.pgdata / "pg_hba.conf"
        if hba.is_file() and hba.read_text(errors="replace") == HBA:
            return
        staging = hba.with_name(".pg_hba.conf.new")
        self._write_owned(staging, HBA)
        staging.replace(hba)  # rename replaces whatever is there, never writes through it

    def _write_owned(self, path: Path, text: str) -> None:
        """A new file (0600) with ``text``, owned by PostgreSQL's user, in a directory that
        user owns. As root we must not follow anything that user may have put at ``path``
        (a symbolic or hard link to a system file): remove it, create exclusively, and
        change the owner through the descriptor."""
        path.unlink(missing_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, text.encode())
            if self.user:
                account = pwd.getpwnam(self.user)
                os.fchown(fd, account.pw_uid, account.pw_gid)
        finally:
            os.close(fd)

    def start(self, timeout_s: float = 60.0) -> None:
        """Initialise the cluster if new, start, and create the admin role and the ``lockstep``
        database (:meth:`_bootstrap`).

        Raises:
            ClusterRefused: the cluster predates passwords, or its superuser's file is gone.
        """
        self.bin_dir = self._prepare()
        self._initdb(self.bin_dir)
        if self.user:
            account = pwd.getpwnam(self.user)
            with contextlib.suppress(FileNotFoundError):
                # Not through a link the service user may have put there (it owns data_dir).
                os.chown(self.log_path, account.pw_uid, account.pw_gid, follow_symlinks=False)
        for attempt in range(PORT_ATTEMPTS):
            try:
                self._serve(self.bin_dir, timeout_s)
                break
            except StartFailed as exc:
                if not self._port_chosen or attempt + 1 == PORT_ATTEMPTS or not _port_taken(exc):
                    raise
                # The port was free when we chose it and another server (a second stack starting
                # at the same moment) took it before ours bound it: choose again.
                self.port = free_port()
        self._bootstrap()

    def _serve(self, bin_dir: Path, timeout_s: float) -> None:
        """Spawn ``postgres`` on ``self.port`` and wait until it is ready."""
        argv = [
            str(bin_dir / "postgres"),
            "-D",
            str(self.pgdata),
            "-p",
            str(self.port),
            "-c",
            "listen_addresses=127.0.0.1",
            # TCP only: a Unix socket's path is capped at 107 bytes, and a data directory a
            # little deep (a CI runner's temp tree) put pgdata's socket over it, so the server
            # refused to start. Everything here connects to 127.0.0.1.
            "-c",
            "unix_socket_directories=",
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
        # Ready means *ours* is ready: PostgreSQL's own postmaster.pid names our process and
        # says "ready" (its status line, PostgreSQL >= 10), which it writes only once it holds
        # the TCP port and accepts connections. Without that, another server that took the
        # port meanwhile (a second stack started at the same moment) would answer the probe,
        # and our services would connect to it while our own postgres exits, unable to bind.
        self.proc = spawn(
            argv, log_path=self.log_path, user=self.user, parent_death_signal=signal.SIGINT
        )
        proc = self.proc
        wait_until(
            lambda: (
                _says_ready(self.pgdata / "postmaster.pid", proc.pid, self.port)
                and port_open("127.0.0.1", self.port)
                and self._accepts()
            ),
            timeout_s=timeout_s,
            what=f"PostgreSQL on 127.0.0.1:{self.port}",
            proc=self.proc,
            log_path=self.log_path,
        )

    def psql(
        self, sql: str, *, identity: str = SUPERUSER_IDENTITY, database: str = "postgres"
    ) -> subprocess.CompletedProcess[bytes]:
        """Run ``sql`` (read from stdin, never argv) as ``identity``, whose password libpq reads
        from its password file (``PGPASSFILE``); ``-w``: fail rather than prompt for one."""
        # As ourselves, from the wheel: never a binary in the data directory, which the service
        # user owns and could replace.
        argv = [
            str(postgres_bin_dir() / "psql"),
            "-X",
            "-q",
            "-w",
            "-v",
            "ON_ERROR_STOP=1",
            "-At",
            "-h",
            "127.0.0.1",
            "-p",
            str(self.port),
            "-U",
            role_of(identity),
            "-d",
            database,
        ]
        # Nothing inherited but what a program needs (server_env): no PG* variable
        # (PGPASSWORD would win over the file, PGSERVICE add a host), no operator's secret.
        env = server_env(PGPASSFILE=str(self.passfile(identity)))
        return subprocess.run(
            argv, input=sql.encode(), capture_output=True, check=False, timeout=30, env=env
        )

    def _accepts(self) -> bool:
        result = self.psql("SELECT 1")
        if b"authentication failed" in result.stderr:
            raise ClusterRefused(
                f"the PostgreSQL cluster in {self.pgdata} refuses the superuser password in "
                f"{self.passfile(SUPERUSER_IDENTITY)}: restore the file that belongs to it, or "
                f"remove {self.data_dir} (its data is lost)"
            )
        return result.returncode == 0

    def _run(self, sql: str, what: str, **kwargs: str) -> str:
        result = self.psql(sql, **kwargs)
        if result.returncode != 0:
            raise RuntimeError(
                f"cannot {what}: {result.stderr.decode(errors='replace').strip()}\n"
                f"{tail(self.log_path)}"
            )
        return result.stdout.decode()

    def _bootstrap(self) -> None:
        """As the superuser: the admin role (its password from its file, set on every start so
        file and server always agree), the database it owns, and no default access for
        PUBLIC to it or to ``postgres``."""
        password = ensure_password(self.passfile(ADMIN_IDENTITY), ADMIN_ROLE)
        self._run(
            f"""
            SELECT 'CREATE ROLE {ADMIN_ROLE}'
             WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{ADMIN_ROLE}') \\gexec
            ALTER ROLE {ADMIN_ROLE} WITH LOGIN CREATEROLE NOSUPERUSER NOCREATEDB NOREPLICATION
                NOBYPASSRLS PASSWORD '{scram_verifier(password)}';
            -- The roles it creates are granted to it with SET (migrations run as the schema's
            -- owner) and INHERIT (operators' commands read any service's tables).
            ALTER ROLE {ADMIN_ROLE} SET createrole_self_grant = 'set, inherit';
            SELECT 'CREATE DATABASE {DATABASE} OWNER {ADMIN_ROLE}'
             WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = '{DATABASE}') \\gexec
            REVOKE ALL ON DATABASE postgres FROM PUBLIC;
            REVOKE ALL ON DATABASE {DATABASE} FROM PUBLIC;
            """,
            "create the admin role and the database",
        )
        # In the database: nothing in schema public for anyone but its owner (the admin).
        self._run(
            "REVOKE ALL ON SCHEMA public FROM PUBLIC",
            "lock schema public",
            database=DATABASE,
        )

    def provision(self, identity: str) -> str:
        """As the admin: ``identity``'s role (its password from its file, generated on first
        use), allowed to connect to the database, and its schema (named ``identity``), owned by
        it. Returns the identity's DSN. Idempotent.

        Raises:
            ValueError: ``identity`` is reserved or not a plain lower-case name.
            RuntimeError: the schema exists but belongs to another role.
        """
        if identity in _RESERVED:
            raise ValueError(f"{identity!r} is reserved for the servers' own roles")
        role = role_of(identity)
        password = ensure_password(self.passfile(identity), role)
        self._run(
            f"""
            SET createrole_self_grant = 'set, inherit';
            SELECT 'CREATE ROLE {role}'
             WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{role}') \\gexec
            ALTER ROLE {role} WITH LOGIN NOINHERIT
                PASSWORD '{scram_verifier(password)}';
            GRANT CONNECT ON DATABASE {DATABASE} TO {role};
            CREATE SCHEMA IF NOT EXISTS "{identity}" AUTHORIZATION {role};
            DO $$ BEGIN
                IF (SELECT nspowner FROM pg_namespace WHERE nspname = '{identity}')
                   <> '{role}'::regrole THEN
                    RAISE 'schema {identity} belongs to %, not {role}: drop it, or give it and '
                        'every object in it to {role}', (SELECT nspowner::regrole
                        FROM pg_namespace WHERE nspname = '{identity}');
                END IF;
            END $$;
            """,
            f"create the role and schema of {identity}",
            identity=ADMIN_IDENTITY,
            database=DATABASE,
        )
        return self.dsn(identity)

    def stop(self) -> None:
        """Fast shutdown (SIGINT: roll back open transactions, checkpoint, exit)."""
        if self.proc is not None:
            stop(self.proc, signal.SIGINT, timeout_s=30)
            self.proc = None


def _says_ready(pid_file: Path, pid: int, port: int) -> bool:
    """Whether ``postmaster.pid`` is that of process ``pid`` on ``port`` and says ``ready``.

    Its lines (PostgreSQL's ``pidfile.h``): 1 the postmaster's PID, 4 the port, 8 the status
    (``starting``, ``ready``, ``stopping``). A file left by a server killed outright names
    another PID and is not taken for ours.
    """
    try:
        lines = pid_file.read_text().splitlines()
    except OSError:
        return False
    return (
        len(lines) >= 8
        and lines[0].strip() == str(pid)
        and lines[3].strip() == str(port)
        and lines[7].strip() == "ready"
    )
