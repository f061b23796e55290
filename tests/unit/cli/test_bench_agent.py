"""``lockstep bench agent``: the agent's real cycle on 8 GPUs' worth of probes, measured."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lockstep_agent.probes.node import probe_node
from lockstep_bench.agent import GPUS, fake_nvml, fake_root
from lockstep_bench.cli import bench_app

pytestmark = pytest.mark.unit


def test_the_fake_node_is_read_as_eight_gpus_with_xids(tmp_path: Path) -> None:
    facts = probe_node(fake_root(tmp_path), None, fake_nvml())
    assert len(facts.nvml.gpus) == GPUS
    assert all(g.nvlink_crc_errors == 0 and not g.errors for g in facts.nvml.gpus)
    assert len(facts.files.nic_firmware) == GPUS
    assert facts.xids.counts() == {"13": 40}


def test_bench_agent_json() -> None:
    result = CliRunner().invoke(bench_app, ["agent", "--cycles", "10", "--no-xid", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert (out["cycles"], out["gpus"], out["published"]) == (10, GPUS, 20)
    assert 0 < out["cpu_s_per_cycle_median"] <= out["cpu_s_per_cycle_p99"]
    assert out["rss_mb"] >= out["rss_imported_mb"] > 0
    assert out["cpu_percent_of_core"] == pytest.approx(
        100 * out["cpu_s_per_cycle_median"] / out["cadence_s"], abs=1e-3
    )
