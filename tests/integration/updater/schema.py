"""The updater's schema migrated on the tests' PostgreSQL, as the service migrates it at start."""

from __future__ import annotations

import asyncpg

from lockstep_common import db


async def migrated(database_url: str, namespace: str) -> str:
    """Migrate ``<namespace>_updater`` (the messaging tables and the updater's own); its name."""
    schema = f"{namespace}_updater"
    conn = await asyncpg.connect(database_url)
    try:
        migrations = db.load_migrations("updater", "lockstep_updater.migrations")
        await db.migrate(conn, schema, db.messaging_migrations() + migrations)
    finally:
        await conn.close()
    return schema
