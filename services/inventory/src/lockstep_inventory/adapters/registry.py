"""The fleet registry table (migrations/0001_registry.sql, 0006_plain_http.sql,
0007_power_side.sql, 0009_node_version.sql).

Every change to an entry draws it a new ``version`` (``nodes_version``) in the transaction that
makes it: what ``fleet.query`` answers with each node, so that a copy of the entry kept
elsewhere (the updater's wave snapshot) is known to be older."""

from __future__ import annotations

from dataclasses import dataclass, field

from lockstep_common.db import Conn
from lockstep_inventory.domain.fleet_file import NodeEntry

FIELDS = (  # the nodes table's columns, in NodeEntry's order
    "id",
    "bmc_url",
    "profile",
    "supplier",
    "site",
    "rack",
    "fabric_domain",
    "pool",
    "credentials",
    "power_side",
    "allow_plain_http",
)


@dataclass(frozen=True, slots=True)
class ImportResult:
    """What an import changed."""

    added: int
    updated: int
    unchanged: int
    versions: dict[str, int] = field(default_factory=dict)
    """Each node added or updated: its entry's version now (``announce``)."""


async def import_nodes(conn: Conn, nodes: list[NodeEntry]) -> ImportResult:
    """Upsert every node in one transaction: all or nothing."""
    async with conn.transaction():
        before = {
            r["id"]: tuple(r[f] for f in FIELDS)
            for r in await conn.fetch(
                f"SELECT {', '.join(FIELDS)} FROM nodes WHERE id = ANY($1)", [n.id for n in nodes]
            )
        }
        rows = [tuple(getattr(n, f) for f in FIELDS) for n in nodes]
        changed = [r for r in rows if before.get(r[0]) != r]
        await conn.executemany(
            f"INSERT INTO nodes ({', '.join(FIELDS)}) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11)"
            " ON CONFLICT (id) DO UPDATE SET bmc_url = EXCLUDED.bmc_url,"
            " profile = EXCLUDED.profile, supplier = EXCLUDED.supplier, site = EXCLUDED.site,"
            " rack = EXCLUDED.rack,"
            " fabric_domain = EXCLUDED.fabric_domain, pool = EXCLUDED.pool,"
            " credentials = EXCLUDED.credentials, power_side = EXCLUDED.power_side,"
            " allow_plain_http = EXCLUDED.allow_plain_http, updated_at = now(),"
            " version = nextval('nodes_version')",
            changed,
        )
        versions = await _versions(conn, [r[0] for r in changed])
    added = sum(1 for r in changed if r[0] not in before)
    return ImportResult(added, len(changed) - added, len(rows) - len(changed), versions)


async def _versions(conn: Conn, node_ids: list[str]) -> dict[str, int]:
    if not node_ids:
        return {}
    rows = await conn.fetch("SELECT id, version FROM nodes WHERE id = ANY($1)", node_ids)
    return {r["id"]: r["version"] for r in rows}


async def list_nodes(conn: Conn) -> list[NodeEntry]:
    """Every registered node, by id."""
    rows = await conn.fetch(f"SELECT {', '.join(FIELDS)} FROM nodes ORDER BY id")
    return [NodeEntry.model_validate(dict(r)) for r in rows]


async def removed_version(conn: Conn) -> int:
    """A version for entries removed in the caller's transaction: greater than any they had,
    and than any a copy of them could hold (``announce``)."""
    version: int = await conn.fetchval("SELECT nextval('nodes_version')")
    return version


async def remove_nodes(conn: Conn, node_ids: list[str]) -> list[str]:
    """Forget ``node_ids`` in one transaction: the registry entry, the latest reports and the
    drift set (what status and admission read). History and rollout records stay: they are
    what happened. Returns the ids that were not registered; then nothing is removed."""
    async with conn.transaction():
        rows = await conn.fetch("SELECT id FROM nodes WHERE id = ANY($1) FOR UPDATE", node_ids)
        found = {r["id"] for r in rows}
        missing = [i for i in node_ids if i not in found]
        if missing:
            return missing
        await conn.execute("DELETE FROM observations WHERE node_id = ANY($1)", node_ids)
        await conn.execute("DELETE FROM drift WHERE node_id = ANY($1)", node_ids)
        await conn.execute("DELETE FROM nodes WHERE id = ANY($1)", node_ids)
    return []
