"""``lockstep sim run --help`` and a tiny ``run_bench``."""

from __future__ import annotations

import math

import pytest
from typer.testing import CliRunner

from lockstep_sim.bench import run_bench
from lockstep_sim.cli import sim_app

pytestmark = pytest.mark.integration
OPTIONS = (
    "--nodes", "--profile", "--latency-ms", "--time-scale", "--seed", "--username",
    "--password-file", "--port", "--scheduler-port", "--nats-url", "--namespace", "--cadence-s",
)  # fmt: skip


def test_run_help_lists_its_options() -> None:
    result = CliRunner().invoke(sim_app, ["run", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for option in OPTIONS:
        assert option in result.output


@pytest.mark.parametrize("separate_process", [True, False])
def test_tiny_bench_is_sane(separate_process: bool) -> None:
    result = run_bench(
        20, 0.0, requests=300, concurrency=8, runs=1, separate_process=separate_process
    )
    assert result["nodes"] == 20
    assert result["errors"] == 0
    assert result["gets_per_s"] > 0
    assert result["baseline_per_s"] > 0
    assert math.isfinite(result["ratio"])
    assert result["ratio"] > 0
    assert result["startup_s"] > 0
    assert result["rss_mb"] > 0
    assert result["body_bytes"] > 0
