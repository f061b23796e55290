"""Direct access to the inventory service's own schema, for the benches and tests that stage a
database (``apps/bench``): the operator CLI never comes here, it asks the service over the bus
(``operator_commands``, ``importing``).

A migrated connection runs the service's migrations first, exactly as the service does at
start; a plain one needs the schema as the service left it and changes nothing of its shape.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg

from lockstep_common import db
from lockstep_common.envelope import source_of
from lockstep_common.errors import ConfigurationError
from lockstep_inventory.app import NAME
from lockstep_inventory.settings import Settings

SOURCE = source_of(NAME)  # events committed through here are the service's events


def _schema(settings: Settings) -> str:
    return settings.db_schema or NAME


def _migrations() -> list[db.Migration]:
    return db.messaging_migrations() + db.load_migrations(NAME, "lockstep_inventory.migrations")


async def _migrated(settings: Settings) -> asyncpg.Connection:
    """A connection to the migrated inventory schema (the caller closes it)."""
    schema = _schema(settings)
    conn = await db.connect_with_retry(settings.database_url, attempts=3)
    try:
        await db.migrate(conn, schema, _migrations())
        await db.act_as_owner(conn, schema)
        await conn.execute(f"SET search_path TO {db.quote_ident(schema)}")
    except BaseException:
        await conn.close()
        raise
    return conn


async def _existing(settings: Settings) -> asyncpg.Connection:
    """A connection to the inventory schema as it is, refused (ConfigurationError) when it is
    missing or behind this version's migrations (the caller closes it)."""
    schema = _schema(settings)
    conn = await db.connect_with_retry(settings.database_url, attempts=3)
    try:
        await _check_schema(conn, schema)
        await db.act_as_owner(conn, schema)  # as _migrated: the owner's rights, never lent
        await conn.execute(f"SET search_path TO {db.quote_ident(schema)}")
    except BaseException:
        await conn.close()
        raise
    return conn


async def _check_schema(conn: asyncpg.Connection, schema: str) -> None:
    """Refuse a schema that does not exist or lacks a migration of this version."""
    ident = db.quote_ident(schema)
    if await conn.fetchval("SELECT to_regclass($1)", f"{ident}.schema_migrations") is None:
        raise ConfigurationError(
            f"no inventory schema {schema!r} in this database: start the stack (lockstep "
            "up) or import a fleet (lockstep fleet import FILE) first"
        )
    rows = await conn.fetch(f"SELECT component, version FROM {ident}.schema_migrations")
    applied = {(r["component"], r["version"]) for r in rows}
    behind = [m for m in _migrations() if (m.component, m.version) not in applied]
    if behind:
        first = behind[0]
        raise ConfigurationError(
            f"inventory schema {schema!r} lacks {len(behind)} migration(s) of this version "
            f"(first {first.component}/{first.version:04d}_{first.name}): start the "
            "inventory service, or import a fleet, to apply them"
        )


@asynccontextmanager
async def connection(settings: Settings) -> AsyncIterator[asyncpg.Connection]:
    """One connection to the inventory schema, for the read models in ``queries``; it never
    creates or migrates anything."""
    conn = await _existing(settings)
    try:
        yield conn
    finally:
        await conn.close()


@asynccontextmanager
async def migrated_connection(settings: Settings) -> AsyncIterator[asyncpg.Connection]:
    """One connection to the inventory schema, created and migrated first if needed."""
    conn = await _migrated(settings)
    try:
        yield conn
    finally:
        await conn.close()
