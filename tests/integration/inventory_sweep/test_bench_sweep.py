"""``lockstep bench sweep`` on a tiny fleet: figures are sane, the sink sees every result."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from lockstep_bench.sweep import CountingSink, run_bench
from lockstep_cli.main import app

pytestmark = pytest.mark.integration
NODES = 12


@pytest.mark.parametrize("expand", [True, False])
def test_tiny_bench_is_sane(expand: bool) -> None:
    sinks: list[CountingSink] = []

    def sink_factory() -> CountingSink:
        sinks.append(CountingSink())
        return sinks[-1]

    result = run_bench(
        NODES, 0.0, expand=expand, runs=2, concurrency=4, chunk=5, sink_factory=sink_factory
    )

    assert result["nodes"] == NODES
    assert result["expand"] is expand
    assert result["errors"] == 0
    assert result["raw_errors"] == 0
    assert result["seconds"] > 0
    assert result["raw_seconds"] == result["baseline"] > 0
    # seconds is rounded to milliseconds, BMCs/s (from the unrounded time) to a tenth: on a
    # loaded machine (9 BMCs/s) the tenth is more than 0.1% of it.
    half_ms, half_tenth = 0.0005, 0.05
    slowest, fastest = NODES / (result["seconds"] + half_ms), NODES / (result["seconds"] - half_ms)
    assert slowest - half_tenth <= result["bmcs_per_s"] <= fastest + half_tenth
    assert result["ratio"] > 0
    assert len(result["seconds_runs"]) == len(result["ratio_runs"]) == 2
    assert result["members"] == 30  # gb200 FirmwareInventory
    # The measured path ends at the sink: every BMC reached it, readable and logged out.
    assert [s.results for s in sinks] == [NODES, NODES]
    assert all(s.unreadable == s.logout_errors == 0 for s in sinks)
    assert all(s.expanded == (NODES if expand else 0) for s in sinks)


def test_the_committed_path_ends_at_the_drift_events(servers: Any) -> None:
    # 12 nodes, a quarter pinned to another BMC version: 3 drift.detected per run, as counted
    # by the committed sweep's outcome; a wrong count would show as errors.
    result = run_bench(
        NODES,
        0.0,
        runs=2,
        concurrency=4,
        chunk=5,
        database_url=servers.database_url,
        drifted_share=0.25,
    )
    assert result["committed"] is True
    assert result["errors"] == 0 and result["seconds"] > 0


def test_bench_sweep_command_prints_json(servers: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCKSTEP_NATS_URL", servers.nats_url)
    monkeypatch.setenv("LOCKSTEP_DATABASE_URL", servers.database_url)
    args = ["bench", "sweep", "--nodes", "6", "--latency-ms", "0", "--runs", "1"]
    result = CliRunner().invoke(app, [*args, "--concurrency", "3", "--no-expand", "--json"])

    assert result.exit_code == 0, result.output
    figures = json.loads(result.output)
    assert figures["nodes"] == 6
    assert figures["expand"] is False
    assert figures["errors"] == 0 and figures["committed"] is True
    for key in ("seconds", "ratio", "baseline", "raw_seconds", "bmcs_per_s", "latency_ms"):
        assert figures[key] >= 0
