"""``complete_wave`` runs in every item's last commit: while any item of the wave is open it
answers from one EXISTS, without reading the wave's rows (``lockstep bench rollout`` found a
9,375-node wave reading all its rows at each of its 9,375 ends: 88 million rows)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from lockstep_common import db
from lockstep_common.envelope import source_of
from lockstep_common.outbox import emitting
from lockstep_updater.adapters.repository import PostgresStore, PostgresTx
from lockstep_updater.domain.steps import NodeStep
from tests.integration.updater.schema import migrated
from tests.integration.updater.test_store_contract import STACK, wave

pytestmark = pytest.mark.integration
NODES = 50


class CountingConn:
    """The connection, counting the rows each ``fetch`` returned."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self.rows_fetched = 0

    async def fetch(self, *args: Any) -> list[Any]:
        rows: list[Any] = await self._conn.fetch(*args)
        self.rows_fetched += len(rows)
        return rows

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


@pytest.fixture
async def pool(servers: Any, namespace: str) -> AsyncIterator[asyncpg.Pool]:
    schema = await migrated(servers.database_url, namespace)
    made = await db.create_pool(
        servers.database_url, schema, min_size=1, max_size=2, application_name="reads"
    )
    try:
        yield made
    finally:
        await made.close()


async def test_an_open_wave_is_answered_without_reading_its_items(pool: asyncpg.Pool) -> None:
    store = PostgresStore(pool, source_of("updater"))
    nodes = [f"n{i:03d}" for i in range(NODES)]
    async with store.transaction() as tx:
        await tx.record_plan("r-1", STACK, frozenset(nodes))
        await tx.record_wave(wave(0, *nodes), "c-1")
        claims = [await tx.claim(60) for _ in nodes]
    async with pool.acquire() as conn, conn.transaction(), emitting(conn, "/t") as events:
        counting = CountingConn(conn)
        tx = PostgresTx(counting, events)  # type: ignore[arg-type]
        for claim in claims[:-1]:  # every item but the last ends: each asks, none reads rows
            assert claim is not None
            await tx.advance(claim, NodeStep.DONE)
            assert await tx.complete_wave("r-1", 0) is None
        assert counting.rows_fetched == 0
        last = claims[-1]
        assert last is not None
        await tx.advance(last, NodeStep.FAILED, reason="bad image")
        result = await tx.complete_wave("r-1", 0)  # the last end reads the wave once
    assert counting.rows_fetched == NODES
    assert result is not None
    assert (len(result.succeeded), result.failed) == (NODES - 1, (nodes[-1],))
