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
        assert first == ["common/0001_messaging"]
        assert second == []
        rows = await conn.fetch(
            f'SELECT component, version, checksum FROM "{schema}".schema_migrations'
        )
        assert [(r["component"], r["version"]) for r in rows] == [("common", 1)]
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
