"""Operator actions on the inventory service's own schema (used by ``lockstep fleet ...``).

They run the service's migrations first, exactly as the service does at start, so importing a
fleet works before the service has ever run.
"""

from __future__ import annotations

from lockstep_common import db
from lockstep_inventory.adapters import registry
from lockstep_inventory.app import NAME
from lockstep_inventory.domain.fleet_file import NodeEntry
from lockstep_inventory.settings import Settings


async def import_fleet(settings: Settings, nodes: list[NodeEntry]) -> registry.ImportResult:
    """Migrate the inventory schema if needed, then upsert ``nodes`` in one transaction."""
    schema = settings.db_schema or NAME
    conn = await db.connect_with_retry(settings.database_url, attempts=3)
    try:
        migrations = db.messaging_migrations() + db.load_migrations(
            NAME, "lockstep_inventory.migrations"
        )
        await db.migrate(conn, schema, migrations)
        await conn.execute(f"SET search_path TO {db.quote_ident(schema)}")
        return await registry.import_nodes(conn, nodes)
    finally:
        await conn.close()


async def fleet(settings: Settings) -> list[NodeEntry]:
    """Every registered node."""
    schema = settings.db_schema or NAME
    conn = await db.connect_with_retry(settings.database_url, attempts=3)
    try:
        await conn.execute(f"SET search_path TO {db.quote_ident(schema)}")
        return await registry.list_nodes(conn)
    finally:
        await conn.close()
