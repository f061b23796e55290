"""``lockstep bench plan --service`` at a small size: the running planner plans the generated
fleet from the real inventory (every node of the fleet in its waves but the unfit few), and
the figures are there, its namespace removed afterwards (issue 27, item 3)."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest

from lockstep_bench.plan import fleet
from lockstep_bench.plan_service import run_service_bench

pytestmark = pytest.mark.integration


async def test_the_running_planner_plans_the_generated_fleet(servers: Any) -> None:
    result = await run_service_bench(servers.nats_url, servers.database_url, 300, 50, 30, 1)
    nodes, _ = fleet(300, 50)
    unreadable = sum(1 for n in nodes if not n.readable)
    assert result["service_nodes"] == len(nodes) - unreadable
    assert result["service_waves"] >= 2  # the canary, then the rest
    assert result["service_s"] > 0 and result["core_s"] > 0
    assert result["service_ratio"] == round(result["service_s"] / result["core_s"], 1)
    conn = await asyncpg.connect(servers.database_url)
    try:
        left = await conn.fetchval("SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'bp%'")
    finally:
        await conn.close()
    assert left == 0
