"""``lockstep fleet status`` of a 12,500-node fleet answers within a second (issue 26: the CLI
asks the inventory over the bus instead of reading its tables)."""

from __future__ import annotations

import time

import pytest

from .conftest import Harness, cli_json, harness

pytestmark = pytest.mark.integration
__all__ = ["harness"]
NODES = 12_500


async def stage(h: Harness) -> None:
    """12,500 registered nodes in 25 pools, each read by a sweep; every 100th drifted."""
    pool = h.app.require().pool
    await pool.execute(
        "INSERT INTO nodes (id, bmc_url, profile, supplier, site, rack, fabric_domain, pool,"
        " credentials, power_side, allow_plain_http)"
        " SELECT 'big-' || lpad(i::text, 5, '0'), 'https://10.9.0.1', 'gb200', '', 'site-big',"
        " 'r' || (i / 72), 'nvl-' || (i / 72), 'pool-' || (i % 25), 'env:BMC', 'A', false"
        " FROM generate_series(1, $1) i",
        NODES,
    )
    await pool.execute(
        "INSERT INTO observations (node_id, source, sequence, observed_at, readable, components)"
        " SELECT id, 'redfish', 1, now(), true, '{\"bmc\": \"1.0\"}' FROM nodes"
        " WHERE id LIKE 'big-%'"
    )
    await pool.execute(
        "INSERT INTO drift (node_id, stack_hash, items, kinds, since, evaluated_at)"
        " SELECT id, NULL, '[]', CASE WHEN right(id, 2) = '00' THEN ARRAY['unexpected']"
        " ELSE ARRAY[]::text[] END, now(), now() FROM nodes WHERE id LIKE 'big-%'"
    )


async def test_status_of_12500_nodes_answers_within_a_second(
    env: None, harness: Harness, capsys: pytest.CaptureFixture[str]
) -> None:
    await stage(harness)
    times, status = [], None
    for _ in range(5):
        started = time.perf_counter()
        status = await cli_json("fleet", "status")
        times.append(time.perf_counter() - started)
    assert status is not None
    assert status["fleet"]["nodes"] == NODES + len(harness.nodes)
    assert status["drifted_by_kind"] == {"unexpected": NODES // 100}
    big = [g for g in status["groups"] if g["pool"].startswith("pool-")]
    assert len(big) == 25 and sum(g["nodes"] for g in big) == NODES
    with capsys.disabled():
        print(f"\nfleet status, {NODES} nodes: " + ", ".join(f"{t:.3f}" for t in times) + " s")
    # The best of five: a loaded machine slows some runs, never all of them.
    assert min(times) <= 1.0, times
