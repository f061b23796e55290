"""The planner's fabric-domain rows, pin commands and fabric audit lines, with one set of
assertions run on both planner stores: PostgreSQL (migrations 0001 and 0002) and the in-memory
one the unit tests use. A fake that drifts from the real store fails here."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from lockstep_common import db
from lockstep_common.envelope import source_of
from lockstep_planner.adapters.repository import PostgresStore
from lockstep_planner.domain.fabric import (
    FabricDomain,
    Lifecycle,
    RecycleLevel,
    claim,
    occupy,
    start_update,
)
from lockstep_planner.store import FABRIC_KEY, AuditEntry, FabricRow, PlannerStore, WindowsRow
from lockstep_planner.testing.memory_store import MemoryStore

pytestmark = pytest.mark.integration
T0 = datetime(2026, 3, 1, tzinfo=UTC)


@dataclasses.dataclass
class Backend:
    store: PlannerStore
    pool: asyncpg.Pool | None
    memory: MemoryStore | None


@pytest.fixture(params=["memory", "postgres"])
async def backend(
    request: pytest.FixtureRequest, servers: Any, namespace: str
) -> AsyncIterator[Backend]:
    if request.param == "memory":
        memory = MemoryStore()
        yield Backend(memory, None, memory)
        return
    schema = f"{namespace}_planner"
    conn = await asyncpg.connect(servers.database_url)
    try:
        planner = db.load_migrations("planner", "lockstep_planner.migrations")
        await db.migrate(conn, schema, db.messaging_migrations() + planner)
    finally:
        await conn.close()
    pool = await db.create_pool(
        servers.database_url, schema, min_size=1, max_size=2, application_name="contract"
    )
    try:
        yield Backend(PostgresStore(pool, source_of("planner")), pool, None)
    finally:
        await pool.close()


def row(domain: FabricDomain, *nodes: str, by: str = "planner", at: datetime = T0) -> FabricRow:
    return FabricRow(domain, nodes, by, at)


async def test_a_domain_row_reads_back_as_saved_and_is_replaced_whole(backend: Backend) -> None:
    held = start_update(claim(FabricDomain("d1", current="h1", target=None), "h2", "r-1"))
    async with backend.store.transaction() as tx:
        await tx.save_fabric(row(FabricDomain("d0", current=None, target=None), "n000"))
        await tx.save_fabric(row(held, "n004", "n005"))
    async with backend.store.transaction() as tx:
        rows = await tx.fabric_domains()
    assert sorted(rows) == ["d0", "d1"]
    assert rows["d1"] == row(held, "n004", "n005")
    assert rows["d1"].domain.current is None and rows["d1"].domain.rollout == "r-1"
    later = T0 + timedelta(hours=1)
    changed = dataclasses.replace(
        occupy(FabricDomain("d0", current="h1", target="h2")), recycle=RecycleLevel.SKIP_RECYCLE
    )
    async with backend.store.transaction() as tx:
        await tx.save_fabric(row(changed, "n000", "n001", by="bob", at=later))
    async with backend.store.transaction() as tx:
        assert await tx.fabric_domains(["d0", "d9"]) == {
            "d0": row(changed, "n000", "n001", by="bob", at=later)
        }
        assert await tx.fabric_domains([]) == {}


async def test_a_transaction_that_raises_saves_no_domain(backend: Backend) -> None:
    with pytest.raises(RuntimeError):
        async with backend.store.transaction() as tx:
            await tx.save_fabric(row(FabricDomain("d0", current=None, target=None)))
            raise RuntimeError("boom")
    async with backend.store.transaction() as tx:
        assert await tx.fabric_domains() == {}


async def test_fabric_audit_lines_are_filed_under_the_domain(backend: Backend) -> None:
    async with backend.store.transaction() as tx:
        await tx.audit(AuditEntry(FABRIC_KEY + "d0", T0, "bob", "pinned", "pinned to h2"))
    if backend.pool is None:
        assert backend.memory is not None
        assert [a.action for a in backend.memory.audit_of("fabric:d0")] == ["pinned"]
        return
    found = await backend.pool.fetch(
        "SELECT actor, action FROM audit WHERE rollout_id = 'fabric:d0'"
    )
    assert [(r["actor"], r["action"]) for r in found] == [("bob", "pinned")]


async def test_many_rows_and_audit_lines_are_written_at_once_in_order(backend: Backend) -> None:
    """Planning 2,000 domains writes them in one statement each (issue 27, item 3): every row
    lands, and the audit lines keep the order they were given in."""
    domains = [FabricDomain(f"d{i:02d}", current=None, target=None) for i in range(12)]
    lines = [AuditEntry(FABRIC_KEY + f"d{i:02d}", T0, "planner", f"a{i}", "x") for i in range(12)]
    async with backend.store.transaction() as tx:
        await tx.save_fabric(*(row(d, f"n{i}") for i, d in enumerate(domains)))
        await tx.audit(*reversed(lines))
        await tx.save_fabric()
        await tx.audit()
    async with backend.store.transaction() as tx:
        rows = await tx.fabric_domains()
    assert [r.node_ids for r in rows.values()] == [(f"n{i}",) for i in range(12)]
    if backend.pool is None:
        assert backend.memory is not None
        found = [a.action for d in rows for a in backend.memory.audit_of(FABRIC_KEY + d)]
        order = [a.action for a in backend.memory.tables.audit]
    else:
        records = await backend.pool.fetch("SELECT action FROM audit ORDER BY id")
        order = [r["action"] for r in records]
        found = order
    assert sorted(found) == sorted(f"a{i}" for i in range(12))
    assert order == [f"a{i}" for i in reversed(range(12))]


async def test_postgres_keeps_derived_state_and_refuses_what_the_domain_never_says(
    servers: Any, namespace: str
) -> None:
    """What readers without Python (the CLI, SQL) see: update state and reason as columns, a
    lifecycle outside the three refused by the table, and a pin command with its bundle."""
    schema = f"{namespace}_planner"
    conn = await asyncpg.connect(servers.database_url)
    try:
        planner = db.load_migrations("planner", "lockstep_planner.migrations")
        await db.migrate(conn, schema, db.messaging_migrations() + planner)
    finally:
        await conn.close()
    pool = await db.create_pool(
        servers.database_url, schema, min_size=1, max_size=2, application_name="contract"
    )
    try:
        store = PostgresStore(pool, source_of("planner"))
        domain = occupy(claim(FabricDomain("d1", current="h1", target=None), "h2", "r-1"))
        async with store.transaction() as tx:
            await tx.save_fabric(row(domain, "n004"))
        got = await pool.fetchrow("SELECT * FROM fabric_domains WHERE domain = 'd1'")
        assert got is not None
        assert (got["lifecycle"], got["update_state"]) == ("OCCUPIED", "WILL_UPDATE")
        assert got["update_reason"] == domain.update_reason
        assert domain.lifecycle is Lifecycle.OCCUPIED
        with pytest.raises(asyncpg.CheckViolationError):
            await pool.execute("UPDATE fabric_domains SET lifecycle = 'DELETED'")
        await pool.execute(
            "INSERT INTO commands (rollout_id, action, requested_by, bundle)"
            " VALUES ('fabric:d1', 'pin', 'bob', 'h3')"
        )
        with pytest.raises(asyncpg.CheckViolationError):
            await pool.execute(
                "INSERT INTO commands (rollout_id, action, requested_by) VALUES ('x', 'drop', 'b')"
            )
        async with store.transaction() as tx:
            [command] = await tx.open_commands(10)
        assert (command.rollout_id, command.action, command.bundle) == ("fabric:d1", "pin", "h3")
    finally:
        await pool.close()


async def test_maintenance_windows_are_replaced_and_removed_whole(backend: Backend) -> None:
    """What `lockstep pool set` leaves in the planner's store (migration 0004)."""
    first = WindowsRow("pool", "p0", "UTC", ("sat 22:00-06:00",), "alice", T0)
    later = WindowsRow(
        "pool", "p0", "Europe/Berlin", ("sun 01:00-03:00", "wed 02:00-03:00"), "bob", T0
    )
    site = WindowsRow("site", "p0", "UTC", ("daily 01:00-02:00",), "carol", T0)
    async with backend.store.transaction() as tx:
        assert await tx.set_maintenance("pool", "p0", first) is None
        assert await tx.set_maintenance("site", "p0", site) is None
    async with backend.store.transaction() as tx:
        assert await tx.set_maintenance("pool", "p0", later) == first
        assert await tx.maintenance() == [later, site]
    async with backend.store.transaction() as tx:
        assert await tx.set_maintenance("pool", "p0", None) == later
        assert await tx.set_maintenance("pool", "nope", None) is None
        assert await tx.maintenance() == [site]
