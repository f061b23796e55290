"""The updater's records for the ``lockstep`` CLI: ``lockstep node history`` (read-only),
``lockstep node approve-remedy`` (releases a held GSP runbook item) and ``lockstep node
release`` (gives a quarantined node back, through the updater). One connection, no
migration."""

from __future__ import annotations

from lockstep_common import db
from lockstep_common.errors import ConfigurationError
from lockstep_updater.adapters.repository import release_quarantined, release_remedy, step_history
from lockstep_updater.app import NAME
from lockstep_updater.settings import Settings
from lockstep_updater.store import StepRecord


async def _connect(settings: Settings) -> db.Conn:
    """A connection on the updater's schema; ``ConfigurationError`` when it has none."""
    schema = settings.db_schema or NAME
    conn = await db.connect_with_retry(settings.database_url, attempts=3)
    await conn.execute(f"SET search_path TO {db.quote_ident(schema)}")
    if await conn.fetchval("SELECT to_regclass('node_steps')") is None:
        await conn.close()
        raise ConfigurationError(
            f"no updater records in schema {schema!r} (has the updater service run against "
            "this database? set LOCKSTEP_UPDATER_DB_SCHEMA if it uses another schema)"
        )
    return conn


async def history(settings: Settings, node_id: str, limit: int) -> list[StepRecord]:
    """The node's last ``limit`` steps, oldest first.

    Raises:
        ConfigurationError: the database has no updater schema (the service never ran there).
    """
    conn = await _connect(settings)
    try:
        return await step_history(conn, node_id, limit)
    finally:
        await conn.close()


async def approve_remedy(settings: Settings, node_id: str) -> bool:
    """Release the node's GSP runbook item held for approval; False when none is held.

    Raises:
        ConfigurationError: the database has no updater schema (the service never ran there).
    """
    conn = await _connect(settings)
    try:
        return await release_remedy(conn, node_id)
    finally:
        await conn.close()


async def release(settings: Settings, node_id: str, reason: str) -> str:
    """Have the updater give back a quarantined node's drain (``release_quarantined``);
    returns the release's id.

    Raises:
        ConfigurationError: the database has no updater schema (the service never ran there).
        NotQuarantined: the node's latest work item did not end quarantined.
    """
    conn = await _connect(settings)
    try:
        return await release_quarantined(conn, node_id, reason)
    finally:
        await conn.close()
