"""``lockstep bench ingest`` at tiny sizes: the figures are there and the reports were applied."""

from __future__ import annotations

import re
from typing import Any

import asyncpg
import nats
import pytest

from lockstep_bench.ingest import IngestOptions, run_bench

pytestmark = pytest.mark.integration


async def test_bench_ingest_applies_every_report_and_times_each_detection(servers: Any) -> None:
    opts = IngestOptions(
        nodes=24, reports=240, rate=400, duration_s=0.5, changed=0.25, batch=32, runs=1
    )
    result = await run_bench(servers.nats_url, servers.database_url, opts)

    for key in (
        "seconds",
        "ratio",
        "reports_per_s",
        "raw_reports_per_s",
        "p50_ms",
        "p99_ms",
        "rate",
        "nodes",
        "reports",
        "runs",
        "per_run",
    ):
        assert key in result, key
    assert (result["nodes"], result["reports"], result["runs"]) == (24, 240, 1)
    assert result["reports_per_s"] > 0 and result["raw_reports_per_s"] > 0
    assert result["ratio"] == pytest.approx(
        result["reports_per_s"] / result["raw_reports_per_s"], 0.01
    )
    [run] = result["per_run"]
    # The bench compares the stored state with what it published (and raises when they differ):
    # every node holds its last sequence, exactly the nodes left off the pin are drifted.
    assert run["nodes_applied"] == 24
    assert 0 < run["drifted"] <= 24
    # One drift.detected came back for every report that moved a node off the pin.
    assert run["expected_detections"] > 0
    assert run["detections"] == run["expected_detections"]
    assert 0 < result["p50_ms"] <= result["p99_ms"] <= run["max_ms"]


async def test_bench_ingest_leaves_no_streams_or_schemas(servers: Any) -> None:
    opts = IngestOptions(nodes=4, reports=16, rate=100, duration_s=0.2, changed=0.5, runs=1)
    await run_bench(servers.nats_url, servers.database_url, opts)
    nc = await nats.connect(servers.nats_url)
    try:
        streams = [i.config.name or "" for i in await nc.jetstream().streams_info()]
    finally:
        await nc.close()
    conn = await asyncpg.connect(servers.database_url)
    try:
        schemas = await conn.fetch(
            "SELECT nspname FROM pg_namespace WHERE nspname ~ '^bi[0-9a-f]{8}_'"
        )
    finally:
        await conn.close()
    assert [s for s in streams if re.match(r"^BI[0-9A-F]{8}_", s)] == []
    assert schemas == []
