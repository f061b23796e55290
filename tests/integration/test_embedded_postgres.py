"""The embedded PostgreSQL.

Started by root, it runs as its service user with that user's group only, and reaches binaries
and cluster that live under private (0700) directories, as in a clone under ``/root``, without
opening the binaries' directory to anyone.

Everyone, root or not, logs in with a password (SCRAM-SHA-256) kept in a file: each service as
its own role, which reaches its own schema and nothing else; and two stacks with default
settings on one machine cannot log in to each other.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pwd
import shutil
import socket
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, quote, urlsplit, urlunsplit

import asyncpg
import pytest
from typer.testing import CliRunner

from lockstep_cli.main import app as cli_app
from lockstep_cli.schemas import prepare_schemas, service_migrations
from lockstep_cli.supervisor import SERVICES
from lockstep_common import db
from lockstep_common.errors import ConfigurationError
from lockstep_common.settings import ServiceSettings
from lockstep_devstack import Stack, postgres
from lockstep_devstack.postgres import (
    SERVICE_USER,
    ClusterRefused,
    PostgresServer,
    postgres_bin_dir,
)
from lockstep_devstack.process import StartFailed

pytestmark = pytest.mark.integration


@pytest.fixture
def base() -> Iterator[Path]:
    # Not pytest's tmp_path: its 0700 parents would get the search bit this test looks for.
    path = Path(tempfile.mkdtemp(prefix="lockstep-pg-test-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _ids(pid: int) -> dict[str, list[int]]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("Uid", "Gid", "Groups"):
            fields[key] = [int(v) for v in value.split()]
    return fields


# Only root hands PostgreSQL to another user; anyone else runs it as themselves.
@pytest.mark.skipif(os.geteuid() != 0, reason="only root runs PostgreSQL as a service user")
def test_private_binaries_and_cluster(
    base: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    home = base / "home"  # where the clone and its .venv live, like /root/.fresh.XXXX
    home.mkdir(mode=0o700)
    wheel = postgres_bin_dir().parents[1]  # site-packages/pgserver, and its vendored libraries
    site = home / "site-packages"
    skip = shutil.ignore_patterns("include")
    shutil.copytree(wheel, site / wheel.name, symlinks=True, ignore=skip)
    shutil.copytree(wheel.with_name(f"{wheel.name}.libs"), site / f"{wheel.name}.libs")
    monkeypatch.setattr(postgres, "postgres_bin_dir", lambda: site / "pgserver/pginstall/bin")
    private = base / "private"  # where the user keeps the cluster
    private.mkdir(mode=0o700)
    server = PostgresServer(private / "pg", secrets_dir=private / "secrets", durable=False)
    caplog.set_level(logging.WARNING, logger=postgres.__name__)
    try:
        server.start()
        assert server.proc is not None
        ids = _ids(server.proc.pid)
        assert server.psql("SELECT 1").stdout.strip() == b"1"
    finally:
        server.stop()
    account = pwd.getpwnam(SERVICE_USER)
    assert ids == {"Uid": [account.pw_uid] * 4, "Gid": [account.pw_gid] * 4, "Groups": []}
    assert server.bin_dir == private / "pg/pginstall/pgserver/pginstall/bin"  # not the private one
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert stat.S_IMODE(private.stat().st_mode) == 0o701  # the one bit, and said so
    assert f"could not enter {private}: added its search permission" in caplog.text


# --- roles and passwords -------------------------------------------------------------------


def _started(data_dir: Path) -> Stack:
    """A stack as ``lockstep up`` starts one with default settings: every service's role and
    schema set up and migrated by the admin."""
    stack = Stack(data_dir, durable=False)
    stack.start()
    try:
        prepare_schemas(stack, SERVICES, lambda _: None)
    except BaseException:
        stack.stop()
        raise
    return stack


def _new_dir(prefix: str) -> Path:
    # Not pytest's tmp_path: PostgreSQL's service user (as root) must enter every parent.
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o755)
    return path


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    top = _new_dir("lockstep-roles-")
    # Deep enough that a Unix socket in pgdata would pass the 107-byte limit of its path (a CI
    # runner's temp tree is this deep): the server must start all the same.
    data_dir = top / ("a-deep-data-directory-" * 4)
    data_dir.mkdir(mode=0o755)
    running = _started(data_dir)
    try:
        yield running
    finally:
        running.stop()
        shutil.rmtree(top, ignore_errors=True)


def _url(stack: Stack, identity: str) -> str:
    """The DSN ``identity`` connects with: the admin's is the stack's own."""
    if identity == "admin":
        assert stack.database_url is not None
        return stack.database_url
    return stack.database_env(identity)["LOCKSTEP_DATABASE_URL"]


def _port(url: str, port: int) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{parts.username}@127.0.0.1:{port}"))


async def _may(conn: asyncpg.Connection, sql: str) -> bool:
    """Whether ``sql`` gets past the privilege checks (rolled back either way); a constraint
    refusing the row still means the role was allowed to write."""
    tx = conn.transaction()
    await tx.start()
    try:
        await conn.execute(sql)
    except asyncpg.InsufficientPrivilegeError:
        return False
    except asyncpg.PostgresError:
        return True
    finally:
        await tx.rollback()
    return True


async def _tables(stack: Stack) -> dict[str, list[str]]:
    admin = await asyncpg.connect(_url(stack, "admin"))
    try:
        rows = await admin.fetch(
            "SELECT schemaname, tablename, tableowner FROM pg_tables"
            " WHERE schemaname = ANY($1::text[]) ORDER BY 1, 2",
            list(SERVICES),
        )
    finally:
        await admin.close()
    assert {r["tableowner"] for r in rows if r["schemaname"] == "inventory"} == {
        "lockstep_inventory"
    }, "the admin's migrations created tables its service does not own"
    tables: dict[str, list[str]] = {}
    for r in rows:
        assert r["tableowner"] == f"lockstep_{r['schemaname']}"
        tables.setdefault(r["schemaname"], []).append(r["tablename"])
    assert set(tables) == set(SERVICES)
    return tables


async def test_each_service_reads_and_writes_its_own_tables_and_no_one_elses(
    stack: Stack,
) -> None:
    tables = await _tables(stack)
    allowed: dict[tuple[str, str, str, str], bool] = {}
    for reader in SERVICES:
        conn = await asyncpg.connect(_url(stack, reader))
        try:
            assert await conn.fetchval("SELECT current_user") == f"lockstep_{reader}"
            for owner, names in tables.items():
                for table in names:
                    qualified = f"{owner}.{table}"
                    for op, sql in (
                        ("select", f"SELECT FROM {qualified} LIMIT 1"),
                        ("insert", f"INSERT INTO {qualified} DEFAULT VALUES"),
                        ("delete", f"DELETE FROM {qualified}"),
                    ):
                        allowed[reader, owner, table, op] = await _may(conn, sql)
        finally:
            await conn.close()
    expected = {key: key[0] == key[1] for key in allowed}
    assert allowed == expected
    assert len(allowed) > 5 * 30  # every service's tables, not a few


async def test_a_service_role_creates_nothing_outside_its_schema_and_becomes_no_other(
    stack: Stack,
) -> None:
    conn = await asyncpg.connect(_url(stack, "planner"))
    try:
        assert await _may(conn, "CREATE TABLE planner.mine (x int)")
        for sql in (
            "CREATE TABLE inventory.planted (x int)",
            "CREATE TABLE public.planted (x int)",
            "CREATE SCHEMA planted",
            "SET ROLE lockstep_inventory",
            "SET ROLE lockstep_admin",
            "CREATE ROLE planted",
        ):
            assert not await _may(conn, sql), sql
    finally:
        await conn.close()


async def test_a_service_finds_its_schema_current_and_cannot_migrate_anothers(
    stack: Stack,
) -> None:
    own = await asyncpg.connect(_url(stack, "inventory"))
    other = await asyncpg.connect(_url(stack, "attest"))
    try:
        assert await db.migrate(own, "inventory", service_migrations("inventory")) == []
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await db.migrate(other, "inventory", service_migrations("inventory"))
    finally:
        await own.close()
        await other.close()


def _logins(stack: Stack) -> dict[str, str]:
    """Ways in without the right password."""
    pg = stack.postgres
    assert pg is not None
    default = ServiceSettings.model_fields["database_url"].default  # what the attack used
    return {
        "the default settings": _port(default, pg.port),
        "no password": f"postgresql://lockstep_admin@127.0.0.1:{pg.port}/lockstep",
        "a wrong password": f"postgresql://lockstep_admin:guess@127.0.0.1:{pg.port}/lockstep",
        "another role's password file": _url(stack, "planner").replace(
            "lockstep_planner@", "lockstep_inventory@"
        ),
    }


@pytest.mark.parametrize(
    "way",
    [
        "the default settings",
        "no password",
        "a wrong password",
        "another role's password file",
    ],
)
async def test_a_login_without_the_right_password_is_refused(stack: Stack, way: str) -> None:
    with pytest.raises(asyncpg.InvalidPasswordError):
        await asyncpg.connect(_logins(stack)[way])


async def test_there_is_no_unix_socket_to_log_in_through(stack: Stack) -> None:
    """TCP on loopback only: no socket file a local user could try (and none whose path, in a
    deep data directory, is too long for the server to start)."""
    pg = stack.postgres
    assert pg is not None
    assert len(str(pg.pgdata / f".s.PGSQL.{pg.port}")) > 107  # such a socket could not exist
    assert not list(pg.pgdata.glob(".s.PGSQL.*"))
    url = f"postgresql://postgres@/postgres?host={quote(str(pg.pgdata))}&port={pg.port}"
    with pytest.raises(OSError):
        await asyncpg.connect(url)


async def test_a_refused_login_stops_a_service_with_one_line_and_no_secret(stack: Stack) -> None:
    url = _logins(stack)["a wrong password"]
    with pytest.raises(ConfigurationError) as refused:
        await db.connect_with_retry(url, attempts=1)
    message = str(refused.value)
    assert "refused the login: password authentication failed" in message
    assert "guess" not in message and "\n" not in message


def test_passwords_stay_in_private_files(stack: Stack) -> None:
    pg = stack.postgres
    assert pg is not None
    secrets = stack.data_dir / "secrets"
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o700
    identities = {p.name for p in secrets.iterdir()}
    assert identities >= {"superuser", "admin", *SERVICES}
    log = pg.log_path.read_text()
    for identity in identities:
        path = secrets / identity / "pgpass"
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        password = path.read_text().split(":")[-1].strip()
        # Not in any URL handed out, nor in the server's log (roles get SCRAM verifiers).
        assert password not in log
        if identity != "superuser":
            url = _url(stack, identity)
            assert urlsplit(url).password is None
            assert password not in url
            assert parse_qs(urlsplit(url).query)["passfile"] == [str(path.resolve())]


async def test_two_stacks_with_default_settings_cannot_log_in_to_each_other(
    stack: Stack,
) -> None:
    data_dir = _new_dir("lockstep-roles-other-")
    other = await asyncio.to_thread(_started, data_dir)  # it runs migrations in its own loop
    try:
        assert stack.postgres is not None and other.postgres is not None
        here, there = stack.postgres.port, other.postgres.port
        assert here != there
        for identity in ("inventory", "admin"):
            mine, theirs = _url(stack, identity), _url(other, identity)
            # Same role names, same schema names, different passwords.
            assert urlsplit(mine).username == urlsplit(theirs).username
            for url, port in ((theirs, here), (mine, there)):
                with pytest.raises(asyncpg.InvalidPasswordError):
                    await asyncpg.connect(_port(url, port))
            conn = await asyncpg.connect(theirs)  # each is let in by its own server
            await conn.close()
    finally:
        await asyncio.to_thread(other.stop)
        shutil.rmtree(data_dir, ignore_errors=True)


def _copy(stopped: Path, prefix: str) -> Path:
    """A copy of a stopped stack's data directory, owners included (as root the cluster is
    PostgreSQL's service user's, and copying makes it ours)."""
    data_dir = _new_dir(prefix)
    shutil.copytree(stopped, data_dir, dirs_exist_ok=True, symlinks=True)
    for source in stopped.rglob("*"):
        st = source.lstat()
        os.lchown(data_dir / source.relative_to(stopped), st.st_uid, st.st_gid)
    return data_dir


# An older Lockstep's cluster: initdb --auth=trust wrote this (PostgreSQL 16's sample lines).
TRUST_HBA = """local   all             all                                     trust
host    all             all             127.0.0.1/32            trust
host    all             all             ::1/128                 trust
"""


@pytest.fixture(scope="module")
def stopped() -> Iterator[Path]:
    """The data directory of a stack that ran once and stopped."""
    data_dir = _new_dir("lockstep-roles-stopped-")
    Stack(data_dir, durable=False).__enter__().stop()
    try:
        yield data_dir
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        ("trust", "was created by an older Lockstep with password-less (trust) authentication"),
        ("lost", "has no superuser password file at"),
    ],
)
def test_a_cluster_without_passwords_is_refused_with_one_line(
    stopped: Path, damage: str, says: str
) -> None:
    data_dir = _copy(stopped, "lockstep-roles-old-")
    try:
        if damage == "trust":
            (data_dir / "postgres/pgdata/pg_hba.conf").write_text(TRUST_HBA)
        else:
            (data_dir / "secrets/superuser/pgpass").unlink()
        result = CliRunner().invoke(cli_app, ["up", "--data-dir", str(data_dir)])
        assert result.exit_code == 2, result.output
        assert says in result.output
        assert result.output.startswith("error: ") and result.output.count("\n") == 1
        assert not (data_dir / "postgres/pgdata/postmaster.pid").exists()  # nothing started
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def test_an_edited_hba_is_replaced_and_a_link_in_its_place_is_not_followed(
    stopped: Path,
) -> None:
    # PostgreSQL's user owns the cluster directory; as root we must not write, or give that
    # user, whatever file it links pg_hba.conf to.
    data_dir = _copy(stopped, "lockstep-roles-link-")
    victim = _new_dir("lockstep-roles-victim-") / "file"
    planted = postgres.HBA_MARKER + "\nhost all all 0.0.0.0/0 trust\n"
    victim.write_text(planted)
    try:
        hba = data_dir / "postgres/pgdata/pg_hba.conf"
        hba.unlink()
        hba.symlink_to(victim)
        with Stack(data_dir, durable=False):
            pass
        assert victim.read_text() == planted
        assert victim.stat().st_uid == os.geteuid()
        assert not hba.is_symlink() and hba.read_text() == postgres.HBA
        assert "trust" not in hba.read_text().replace("(no trust, no peer)", "")
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
        shutil.rmtree(victim.parent, ignore_errors=True)


def test_a_server_that_cannot_take_its_port_fails_instead_of_trusting_whoever_holds_it(
    stack: Stack,
) -> None:
    """Two stacks started at once may both find the default port free. The one that loses it
    must fail with PostgreSQL's own reason, not pass the other server off as its own (its
    services would then log in to the other stack's server)."""
    assert stack.postgres is not None
    loser_dir = _new_dir("lockstep-port-taken-")
    loser = PostgresServer(
        loser_dir / "pg", secrets_dir=loser_dir / "secrets", port=stack.postgres.port, durable=False
    )
    try:
        # One line naming the port, PostgreSQL's reason and its log (lockstep up prints it).
        with pytest.raises(StartFailed) as failed:
            loser.start(timeout_s=60)
        message = str(failed.value)
        assert "\n" not in message
        assert message.startswith(
            f"PostgreSQL on 127.0.0.1:{stack.postgres.port} exited with code 1 while starting: "
        )
        assert "Address already in use" in message
        assert message.endswith(f"(log {loser_dir / 'pg' / 'postgres.log'})")
    finally:
        loser.stop()
        shutil.rmtree(loser_dir, ignore_errors=True)


async def test_an_operator_command_lends_a_service_none_of_the_admins_rights(
    stack: Stack,
) -> None:
    """A service owns its tables and may hang a trigger on them; an operator's command reading
    or deleting its dead letters as the admin would run that trigger with the admin's rights
    (CREATEROLE, every role). Acting as the schema's owner (``db.act_as_owner``) lends nothing."""
    service = await asyncpg.connect(_url(stack, "inventory"))
    try:
        await service.execute(
            "CREATE FUNCTION inventory.escalate() RETURNS trigger LANGUAGE plpgsql AS $$"
            " BEGIN EXECUTE 'GRANT lockstep_attest TO lockstep_inventory'; RETURN OLD; END $$;"
            " CREATE TRIGGER escalate BEFORE DELETE ON inventory.dead_letters"
            " FOR EACH ROW EXECUTE FUNCTION inventory.escalate();"
            " INSERT INTO inventory.dead_letters (consumer, stream, stream_seq, subject, reason,"
            " error_kind, deliveries, detected_by) VALUES ('c', 's', 1, 'x', 'r', 'k', 1,"
            " 'consumer')"
        )
    finally:
        await service.close()
    admin = await asyncpg.connect(_url(stack, "admin"))
    try:
        await db.act_as_owner(admin, "inventory")
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await admin.execute("DELETE FROM inventory.dead_letters")
        await admin.execute("RESET ROLE")
        member = await admin.fetchval(
            "SELECT pg_has_role('lockstep_inventory', 'lockstep_attest', 'MEMBER')"
        )
    finally:
        await admin.execute("DROP TRIGGER escalate ON inventory.dead_letters")
        await admin.close()
    assert member is False


@pytest.mark.skipif(os.geteuid() != 0, reason="only root hands directories to the PostgreSQL user")
def test_root_refuses_a_link_the_postgres_user_put_where_its_cluster_goes() -> None:
    base = _new_dir("lockstep-planted-")
    victim = _new_dir("lockstep-victim-")
    try:
        (base / "pg").mkdir()
        (base / "pg" / "pgdata").symlink_to(victim)
        server = PostgresServer(base / "pg", secrets_dir=base / "secrets", durable=False)
        with pytest.raises(ClusterRefused, match="is a symbolic link"):
            server.start(timeout_s=30)
        assert victim.stat().st_uid == 0, "root handed the link's target to the PostgreSQL user"
    finally:
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(victim, ignore_errors=True)


def test_a_port_taken_between_choosing_it_and_binding_it_is_chosen_again() -> None:
    """Two stacks starting at the same moment may both find one port free; the one that loses
    the race chooses another instead of failing (an explicit port is never changed)."""
    base = _new_dir("lockstep-port-race-")
    server = PostgresServer(base / "pg", secrets_dir=base / "secrets", durable=False)
    chosen = server.port
    with socket.socket() as squatter:
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", chosen))
        squatter.listen()
        try:
            server.start(timeout_s=60)
            assert server.port != chosen
            assert server.psql("SELECT 1").returncode == 0
        finally:
            server.stop()
            shutil.rmtree(base, ignore_errors=True)
