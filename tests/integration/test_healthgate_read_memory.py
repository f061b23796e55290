"""The healthgate's window read is bounded in memory per reading (issue 13, item 6).

A soak's evaluation reads every reading of a wave's members over the baseline and the soak. As
one list of records with a Python object per field that cost about 300 bytes a reading, and the
service's peak memory grew with the fleet (801 MB at 2,000 nodes in ``lockstep bench rollout``).
Read by cursor in chunks into coded columns, it must stay near the columns' 24 bytes a reading.
"""

from __future__ import annotations

import random
import tracemalloc
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from lockstep_common.envelope import source_of
from lockstep_healthgate.adapters import partitions
from lockstep_healthgate.adapters.pg_store import READ_CHUNK, PgGateStore
from lockstep_healthgate.domain.signals import signals_of
from lockstep_healthgate.store import SampleRow
from lockstep_healthgate.testing.reports import report
from tests.integration.test_healthgate_store_contract import migrated_pool

pytestmark = pytest.mark.integration
NODES = 500
REPORTS = 30
BYTES_PER_READING = 120  # the columns' 24, doubled while chunks are joined, plus one chunk


async def test_reading_a_window_costs_a_bounded_number_of_bytes_per_reading(
    servers: Any, namespace: str
) -> None:
    pool = await migrated_pool(servers, namespace)
    try:
        store = PgGateStore(pool, source_of("healthgate"))
        rng = random.Random(6)
        t0 = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
        nodes = [f"n{i:04d}" for i in range(NODES)]
        stored = 0
        async with store.transaction() as tx:
            await tx.ensure_partitions(
                {partitions.day_of(t0), partitions.day_of(t0 + timedelta(1))}
            )
            for k in range(REPORTS):
                rows = [
                    SampleRow(r.observed_at, n, m, v)
                    for n in nodes
                    for r in (report(n, t0 + timedelta(seconds=10 * k), k + 1, rng),)
                    for m, v in signals_of(r, (79,))
                ]
                stored += await tx.add_samples(rows)
        assert stored > 10 * READ_CHUNK  # many chunks: what is bounded is the whole read
        tracemalloc.start()
        try:
            async with store.transaction() as tx:
                cols = await tx.samples(nodes, None, t0, t0 + timedelta(hours=1))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert cols.rows == stored
        assert set(cols.nodes) == set(nodes)
        assert peak < BYTES_PER_READING * stored, f"{peak / stored:.0f} bytes a reading"
    finally:
        await pool.close()
