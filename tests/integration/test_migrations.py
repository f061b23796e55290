"""Migrations against a real PostgreSQL."""

from __future__ import annotations

import dataclasses
from typing import Any

import asyncpg
import pytest

from lockstep_common import db
from lockstep_common.errors import MigrationError

pytestmark = pytest.mark.integration


async def test_migrations_apply_once_and_record_their_checksums(
    servers: Any, namespace: str
) -> None:
    conn = await asyncpg.connect(servers.database_url)
    try:
        schema = f"{namespace}_m"
        first = await db.migrate(conn, schema, db.messaging_migrations())
        second = await db.migrate(conn, schema, db.messaging_migrations())
        assert first == ["common/0001_messaging", "common/0002_operator_requests"]
        assert second == []
        rows = await conn.fetch(
            f'SELECT component, version, checksum FROM "{schema}".schema_migrations'
            " ORDER BY version"
        )
        assert [(r["component"], r["version"]) for r in rows] == [("common", 1), ("common", 2)]
        assert rows[0]["checksum"] == db.messaging_migrations()[0].checksum
    finally:
        await conn.close()


async def test_a_changed_migration_is_refused_and_changes_nothing(
    servers: Any, namespace: str
) -> None:
    conn = await asyncpg.connect(servers.database_url)
    try:
        schema = f"{namespace}_m"
        await db.migrate(conn, schema, db.messaging_migrations())
        edited = dataclasses.replace(db.messaging_migrations()[0], sql="DROP TABLE outbox;")
        with pytest.raises(MigrationError, match="was changed after it was applied"):
            await db.migrate(conn, schema, [edited])
        assert await conn.fetchval(f'SELECT count(*) FROM "{schema}".outbox') == 0
    finally:
        await conn.close()


async def test_a_failing_migration_rolls_back_entirely(servers: Any, namespace: str) -> None:
    conn = await asyncpg.connect(servers.database_url)
    try:
        schema = f"{namespace}_m"
        broken = db.Migration("svc", 1, "broken", "CREATE TABLE a (x int); SELECT * FROM nowhere;")
        with pytest.raises(MigrationError, match="svc/0001_broken failed"):
            await db.migrate(conn, schema, [broken])
        exists = await conn.fetchval("SELECT to_regclass($1)", f"{schema}.a")
        assert exists is None
    finally:
        await conn.close()


async def test_an_admins_migration_creates_tables_the_schemas_owner_owns(
    servers: Any, namespace: str
) -> None:
    # As `lockstep up` migrates a service's schema: the admin may SET ROLE to the owner.
    conn = await asyncpg.connect(servers.database_url)
    schema, owner = f"{namespace}_m", f"{namespace}_owner"
    me = await conn.fetchval("SELECT current_user")
    try:
        await conn.execute("SET createrole_self_grant = 'set, inherit'")
        await conn.execute(f'CREATE ROLE "{owner}" NOLOGIN')
        await conn.execute(f'CREATE SCHEMA "{schema}" AUTHORIZATION "{owner}"')
        assert await db.migrate(conn, schema, db.messaging_migrations()) == [
            "common/0001_messaging",
            "common/0002_operator_requests",
        ]
        owners = await conn.fetch(
            "SELECT DISTINCT tableowner FROM pg_tables WHERE schemaname = $1", schema
        )
        assert [r["tableowner"] for r in owners] == [owner]
        assert await conn.fetchval("SELECT current_user") == me  # only for the migration
    finally:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await conn.execute(f'DROP ROLE IF EXISTS "{owner}"')
        await conn.close()
