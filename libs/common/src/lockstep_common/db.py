"""PostgreSQL: connection pools bound to a service's schema, and the migration runner.

Migrations are ordered SQL files (``NNNN_name.sql``) shipped inside a package. Each applies in
its own transaction under a transaction-scoped advisory lock (session locks break behind
PgBouncer's transaction pooling, reliability.md 2.2), and is recorded with its checksum in
``schema_migrations``; a recorded migration whose file has changed stops the service.

Migrations run as the owner of the schema: an admin role that may ``SET ROLE`` to a service's
role (the embedded stack's ``lockstep_admin``) creates tables the service owns, and a service
that owns its schema migrates it itself. A schema is created only when missing: creating one
needs CREATE on the database, which service roles do not have.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from importlib import resources
from typing import Any, TypeAlias, TypeVar, cast

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from lockstep_common.backoff import Backoff
from lockstep_common.errors import ConfigurationError, MigrationError, TransientError

log = logging.getLogger(__name__)

OUTAGE: tuple[type[Exception], ...] = (OSError, asyncpg.PostgresError, asyncpg.InterfaceError)
"""What a lost or refusing database raises: a background loop logs it and tries next round."""

# A connection as handed out by a pool or opened directly; both speak the same protocol.
Conn: TypeAlias = "asyncpg.Connection[asyncpg.Record] | PoolConnectionProxy[asyncpg.Record]"

_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_IDENT = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def quote_ident(name: str) -> str:
    """Quote a schema name after checking it is a plain lower-case identifier."""
    if not _IDENT.fullmatch(name):  # match would let '$' accept a trailing newline
        raise ValueError(f"{name!r} is not a valid schema name (lower-case letters, digits, '_')")
    return f'"{name}"'


@dataclass(frozen=True, slots=True)
class Migration:
    """One SQL file."""

    component: str
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        """SHA-256 of the file's text."""
        return hashlib.sha256(self.sql.encode()).hexdigest()


def load_migrations(component: str, package: str) -> list[Migration]:
    """Read ``package``'s ``NNNN_name.sql`` files in version order."""
    found = []
    for entry in resources.files(package).iterdir():
        match = _FILE.match(entry.name)
        if match is None and entry.name.endswith(".sql"):
            # A misnamed file would silently never run: refuse it instead.
            raise MigrationError(f"{package}/{entry.name} is not named NNNN_lower_snake.sql")
        if match:
            found.append(
                Migration(component, int(match[1]), match[2], entry.read_text(encoding="utf-8"))
            )
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise MigrationError(f"duplicate migration versions in {package}: {versions}")
    return found


def messaging_migrations() -> list[Migration]:
    """The outbox/inbox/dead-letter tables every service schema has."""
    return load_migrations("common", "lockstep_common.migrations")


async def migrate(conn: asyncpg.Connection, schema: str, migrations: list[Migration]) -> list[str]:
    """Apply what is not yet applied; return the names applied now.

    Raises:
        MigrationError: a recorded migration's checksum differs from the shipped file.
    """
    ident = quote_ident(schema)
    applied_now: list[str] = []
    async with conn.transaction():
        await conn.execute(
            "SELECT pg_advisory_xact_lock(hashtext($1))", f"lockstep-migrate:{schema}"
        )
        await _enter_schema(conn, schema)
        await conn.execute(
            f"CREATE TABLE IF NOT EXISTS {ident}.schema_migrations ("
            " component text NOT NULL, version integer NOT NULL, name text NOT NULL,"
            " checksum text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now(),"
            " PRIMARY KEY (component, version))"
        )
        rows = await conn.fetch(
            f"SELECT component, version, checksum FROM {ident}.schema_migrations"
        )
        recorded = {(r["component"], r["version"]): r["checksum"] for r in rows}
        for m in migrations:
            have = recorded.get((m.component, m.version))
            if have is not None:
                if have != m.checksum:
                    raise MigrationError(
                        f"migration {m.component}/{m.version:04d}_{m.name} was changed after it "
                        f"was applied to schema {schema} (recorded {have[:12]}, file "
                        f"{m.checksum[:12]}); add a new migration instead"
                    )
                continue
            await conn.execute(f"SET LOCAL search_path TO {ident}")
            try:
                await conn.execute(m.sql)
            except asyncpg.PostgresError as exc:
                raise MigrationError(
                    f"migration {m.component}/{m.version:04d}_{m.name} failed: {exc}"
                ) from exc
            await conn.execute(
                f"INSERT INTO {ident}.schema_migrations (component, version, name, checksum)"
                " VALUES ($1, $2, $3, $4)",
                m.component,
                m.version,
                m.name,
                m.checksum,
            )
            applied_now.append(f"{m.component}/{m.version:04d}_{m.name}")
    return applied_now


async def _enter_schema(conn: asyncpg.Connection, schema: str) -> None:
    """In the current transaction: create ``schema`` if missing, else become its owner when
    we are not and may (``SET LOCAL ROLE``), so that what a migration creates is the owner's
    whoever applies it (an admin's tables would be invisible to the service)."""
    owner = await conn.fetchval(
        "SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = $1", schema
    )
    if owner is None:
        await conn.execute(f"CREATE SCHEMA {quote_ident(schema)}")
        return
    become = await conn.fetchval(
        "SELECT $1 <> current_user AND pg_has_role(current_user, $1::regrole, 'SET')", owner
    )
    if become:
        # regrole's text form is already quoted where a name needs it.
        await conn.execute(f"SET LOCAL ROLE {owner}")


async def act_as_owner(conn: asyncpg.Connection, schema: str) -> None:
    """For the rest of the session, act as ``schema``'s owner when we are someone else who may
    (an operator's command connected as the database admin).

    A service owns its tables and may put triggers on them, or make one a view over a function:
    whatever then runs does so with the rights of whoever touches the table. An admin reading or
    deleting dead letters as itself would lend the service its rights (CREATEROLE, every role);
    as the owner, nothing is lent.
    """
    owner = await conn.fetchval(
        "SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = $1", schema
    )
    if owner is None:
        return
    become = await conn.fetchval(
        "SELECT $1 <> current_user AND pg_has_role(current_user, $1::regrole, 'SET')", owner
    )
    if become:
        await conn.execute(f"SET ROLE {owner}")  # regrole's text form is quoted where needed


async def connect_with_retry(
    dsn: str, *, attempts: int = 30, delay_s: float = 0.5
) -> asyncpg.Connection:
    """One connection, retried while the server is starting (bounded, with backoff)."""
    last: Exception | None = None
    for attempt in range(attempts):
        try:
            return await asyncpg.connect(dsn)
        except (OSError, asyncpg.CannotConnectNowError, asyncpg.TooManyConnectionsError) as exc:
            last = exc
            await asyncio.sleep(Backoff(delay_s, 5.0).delay(attempt))
        except asyncpg.InvalidAuthorizationSpecificationError as exc:
            # A wrong role or password (SQLSTATE class 28) stays wrong: no retry, no restart.
            raise ConfigurationError(
                f"PostgreSQL at {_redact(dsn)} refused the login: {exc} (is the password in "
                "the passfile the URL names, or in the URL?)"
            ) from None
    raise TransientError(f"PostgreSQL at {_redact(dsn)} unreachable: {last}")


T = TypeVar("T")
CONFLICTS = (asyncpg.DeadlockDetectedError, asyncpg.SerializationError)
"""SQLSTATE 40P01 and 40001: PostgreSQL aborted the transaction to break a deadlock or a
serialization conflict, and nothing of it was kept; "applications using this level must be
prepared to retry transactions" (PostgreSQL manual, "Transaction Isolation", and "Deadlocks")."""


async def retried_on_conflict(
    transaction: Callable[[], Awaitable[T]],
    *,
    what: str,
    attempts: int = 4,
    backoff: Backoff = Backoff(0.05, 1.0, jitter=0.5),  # noqa: B008 - frozen, shared on purpose
) -> T:
    """``transaction()`` (one whole transaction, begun and ended inside it), run again when
    PostgreSQL aborted it as one side of a deadlock or a serialization conflict, up to
    ``attempts`` runs in all, after a jittered pause (the other side gets through first);
    the last conflict is raised. Any other error is raised at once."""
    for attempt in range(attempts):
        try:
            return await transaction()
        except CONFLICTS as exc:
            if attempt + 1 >= attempts:
                raise
            log.warning("%s: %s; run again (%d of %d)", what, exc, attempt + 2, attempts)
            await asyncio.sleep(backoff.delay(attempt))
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises


class PooledConnection(asyncpg.Connection):
    """A pool's connection that knows whether it may carry session state back to the pool.

    asyncpg resets every released connection with a round trip of its own (``SELECT
    pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL;``): on loopback that is a
    fifth of what a short transaction costs. A connection whose only use since it was
    acquired was one transaction that ended normally (:func:`pooled_transaction`) has nothing
    to reset: a transaction's locks, cursors and ``SET LOCAL`` end with it. Every other use
    (a session advisory lock, ``LISTEN``, ``SET``, a failed block) keeps the full reset.
    """

    __slots__ = ("_transactions_only",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._transactions_only = False

    def used_for_transactions_only(self) -> None:
        """Mark that nothing but ended transactions ran since this connection was acquired."""
        self._transactions_only = True

    def take_transactions_only(self) -> bool:
        """Whether the mark is set; clears it (each acquisition must earn it again)."""
        marked, self._transactions_only = self._transactions_only, False
        return marked


async def _reset_unless_transactions_only(conn: asyncpg.Connection) -> None:
    # asyncpg has already rolled back an open transaction and dropped the listeners
    # (``Connection._reset``) before it calls this (asyncpg ``create_pool(reset=...)``).
    if isinstance(conn, PooledConnection) and conn.take_transactions_only():
        return
    query = conn.get_reset_query()
    if query:
        await conn.execute(query)


@asynccontextmanager
async def pooled_transaction(pool: asyncpg.Pool) -> AsyncIterator[Conn]:
    """A connection of ``pool`` inside one transaction, committed when the block ends normally.

    Run only transaction-scoped statements in the block (``pg_advisory_xact_lock``, ``SET
    LOCAL``): the connection goes back to the pool without asyncpg's reset round trip when the
    transaction ended normally (:class:`PooledConnection`); a block that raised is reset in
    full. Anything that takes session state acquires the connection itself (``pool.acquire()``),
    and is reset in full.
    """
    async with pool.acquire() as conn:
        async with conn.transaction():
            yield conn
        mark = getattr(conn, "used_for_transactions_only", None)
        if mark is not None:  # a pool not made by ``create_pool`` is reset as asyncpg does
            mark()


class _OneStatement:
    """A pooled connection that runs one statement, outside any transaction block."""

    __slots__ = ("_conn", "_sent")

    def __init__(self, conn: Conn) -> None:
        self._conn = conn
        self._sent = False

    def _once(self) -> Conn:
        if self._sent:
            raise RuntimeError(
                "a second statement in a one-statement unit of work would commit apart from "
                "the first: open a transaction instead"
            )
        self._sent = True
        return self._conn

    async def execute(self, query: str, *args: Any) -> str:
        return await self._once().execute(query, *args)

    async def fetch(self, query: str, *args: Any) -> list[asyncpg.Record]:
        return await self._once().fetch(query, *args)

    async def fetchrow(self, query: str, *args: Any) -> asyncpg.Record | None:
        return await self._once().fetchrow(query, *args)

    async def fetchval(self, query: str, *args: Any) -> Any:
        return await self._once().fetchval(query, *args)

    def is_in_transaction(self) -> bool:
        return False  # the outbox refuses to write here (``outbox.enqueue``)


@asynccontextmanager
async def pooled_statement(pool: asyncpg.Pool) -> AsyncIterator[Conn]:
    """A connection of ``pool`` for one statement, which PostgreSQL runs as a transaction of
    its own ("autocommit", manual 3.4): one round trip where ``pooled_transaction`` takes three
    (BEGIN, the statement, COMMIT). A second statement raises ``RuntimeError`` before it is
    sent. Given back as after :func:`pooled_transaction` (the statement must take no session
    state)."""
    async with pool.acquire() as conn:
        yield cast(Conn, _OneStatement(conn))
        mark = getattr(conn, "used_for_transactions_only", None)
        if mark is not None:
            mark()


async def create_pool(
    dsn: str, schema: str, *, min_size: int, max_size: int, application_name: str
) -> asyncpg.Pool:
    """A pool whose connections resolve unqualified table names in ``schema``; a connection
    released after :func:`pooled_transaction` skips asyncpg's reset round trip."""
    pool = await asyncpg.create_pool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        server_settings={"search_path": schema, "application_name": application_name},
        connection_class=PooledConnection,
        reset=_reset_unless_transactions_only,
    )
    if pool is None:  # asyncpg's stub allows None; a created pool never is
        raise TransientError("asyncpg returned no pool")
    return pool


def _redact(dsn: str) -> str:
    """A DSN with its password replaced, safe for logs and errors."""
    return re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", dsn)


redact_dsn = _redact
