"""Operator actions on the inventory service's own schema (used by ``lockstep fleet ...``).

Importing a fleet runs the service's migrations first, exactly as the service does at start,
so it works before the service has ever run. Every other action needs the schema as the
service (or an import) left it and changes nothing of its shape: reading the status of a
mistyped ``LOCKSTEP_INVENTORY_DB_SCHEMA`` must not create that schema. Sweeps committed here
are the service's own sweeps: same lock, same state tables, drift events into the same outbox,
which the service's relay publishes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager

import asyncpg

from lockstep_common import db
from lockstep_common.compatibility.files import load_rules
from lockstep_common.envelope import source_of
from lockstep_common.errors import ConfigurationError
from lockstep_inventory.adapters import registry, sweeps
from lockstep_inventory.app import NAME
from lockstep_inventory.domain.fleet_file import NodeEntry
from lockstep_inventory.settings import Settings
from lockstep_inventory.sweeping import SweepBusyError, SweepSummary, run_sweep

SOURCE = source_of(NAME)  # drift events of a CLI sweep are the service's events


class UnknownNodesError(LookupError):
    """Node ids asked for that are not in the registry."""

    def __init__(self, missing: Sequence[str], message: str = "") -> None:
        super().__init__(message or f"not in the registry: {', '.join(missing)}")
        self.missing = tuple(missing)


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


async def import_fleet(settings: Settings, nodes: list[NodeEntry]) -> registry.ImportResult:
    """Migrate the inventory schema if needed, then upsert ``nodes`` in one transaction."""
    async with migrated_connection(settings) as conn:
        return await registry.import_nodes(conn, nodes)


async def remove(settings: Settings, node_ids: Sequence[str]) -> None:
    """Forget ``node_ids``: all or none (an unregistered id raises UnknownNodesError)."""
    async with connection(settings) as conn:
        missing = await registry.remove_nodes(conn, list(dict.fromkeys(node_ids)))
    if missing:
        raise UnknownNodesError(
            missing, f"not in the registry, nothing removed: {', '.join(missing)}"
        )


async def fleet(settings: Settings) -> list[NodeEntry]:
    """Every registered node."""
    async with connection(settings) as conn:
        return await registry.list_nodes(conn)


async def sweep_fleet(
    settings: Settings,
    node_ids: Sequence[str] = (),
    *,
    on_busy: Callable[[], None] | None = None,
    on_progress: Callable[[int, int], None] | None = None,
) -> SweepSummary:
    """One sweep of the registered fleet (or of ``node_ids``), committed like the service's.

    Raises :class:`UnknownNodesError` before sweeping anything when an id is not registered.
    When another sweep holds the lock, ``on_busy`` is called and the sweep waits for it.
    """
    # The service's rules: a CLI sweep judges drift the same way.
    rules = load_rules(settings.rules_file)
    async with connection(settings) as conn:
        nodes = await registry.list_nodes(conn)
    if not nodes:
        raise UnknownNodesError([], "no nodes are registered (lockstep fleet import first)")
    if node_ids:
        by_id = {n.id: n for n in nodes}
        missing = [i for i in dict.fromkeys(node_ids) if i not in by_id]
        if missing:
            raise UnknownNodesError(missing)
        nodes = [by_id[i] for i in dict.fromkeys(node_ids)]
    # One connection holds the sweep lock, one commits, one starts/finishes the sweep row.
    pool = await db.create_pool(
        settings.database_url,
        _schema(settings),
        min_size=1,
        max_size=4,
        application_name="lockstep-cli",
    )

    async def once(wait: bool) -> SweepSummary:
        return await run_sweep(
            pool,
            nodes,
            settings,
            by="cli",
            source=SOURCE,
            rules=rules,
            wait=wait,
            keep_results=True,
            on_progress=on_progress,
        )

    try:
        try:
            return await once(wait=False)
        except SweepBusyError:
            if on_busy is not None:
                on_busy()
            return await once(wait=True)
    finally:
        await pool.close()


async def sweep_in_progress(conn: asyncpg.Connection) -> sweeps.SweepRow | None:
    """The running sweep, if any: the newest row is unfinished *and* a sweeper holds the lock.

    An unfinished row nobody holds the lock for was left by a sweeper that died (the next sweep
    closes it), so waiting on it would never end.
    """
    row = await sweeps.latest(conn)
    if row is None or row.finished_at is not None:
        return None
    return row if await sweeps.lock_held(conn) else None
