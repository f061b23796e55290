"""``lockstep gate evaluate`` on recorded sample files and ``lockstep bench gate``, as a user runs
them: output and exit codes (0 passed, 1 tripped, 3 inconclusive, 2 bad input)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from lockstep_bench.gate import BenchOptions, run_bench
from lockstep_cli.main import app

pytestmark = pytest.mark.unit
DATA = Path(__file__).resolve().parents[2] / "data" / "gate"
POLICY = str(DATA / "policy.toml")
runner = CliRunner()


def run(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


@pytest.mark.parametrize(
    ("file", "code", "verdict", "says"),
    [
        ("healthy.csv", 0, "passed", "every reported metric within its floor"),
        ("busbw_regression.csv", 1, "tripped", "critical metric nccl_busbw_gbps worse"),
        ("fatal_xid.json", 1, "tripped", "hard rule fatal_xid broken on 1 canary node(s)"),
        ("fleet_wide.csv", 3, "inconclusive", "environmental: control degraded like the canary"),
        ("two_canaries.json", 3, "inconclusive", "too little data for nccl_busbw_gbps"),
    ],
)
def test_recorded_samples_give_their_verdict_and_exit_code(
    file: str, code: int, verdict: str, says: str
) -> None:
    exit_code, out = run(
        "gate", "evaluate", "--samples", str(DATA / file), "--policy", POLICY, "--json"
    )
    assert exit_code == code, out
    decision = json.loads(out)
    assert decision["verdict"] == verdict and says in decision["reason"]
    assert {m["metric"] for m in decision["metrics"]} == {"nccl_busbw_gbps", "gpu_temperature_c"}


def test_the_text_output_shows_the_verdict_evidence_and_offending_nodes() -> None:
    code, out = run(
        "gate", "evaluate", "--samples", str(DATA / "busbw_regression.csv"), "--policy", POLICY
    )
    assert code == 1
    assert "TRIPPED" in out and "nccl_busbw_gbps*" in out and "worse" in out
    assert "nccl_busbw_gbps [gb200] worse: canary 10 node(s)" in out
    assert "offending nodes: canary-00000" in out


def test_the_fatal_xid_names_its_node_and_time() -> None:
    code, out = run(
        "gate", "evaluate", "--samples", str(DATA / "fatal_xid.json"), "--policy", POLICY
    )
    assert code == 1
    assert "fatal_xid [gb200]: 1 of 10 canary node(s)" in out
    assert "canary-00003: XID 79 at 2026-01-01T00:00:25Z" in out


def _aa_sample(path: Path, *, canary_busbw: float = 378.0) -> Path:
    """An A/A sample as agents that measure only busbw and the SM clock report it: 50 canary
    and 50 control nodes of one stratum, five reports each (seeded: the same file each run)."""
    rng = np.random.default_rng(31)
    lines = ["node,group,metric,value,time,stratum"]
    for group, busbw in (("canary", canary_busbw), ("control", 378.0)):
        for n in range(50):
            node_busbw, node_clock = rng.normal(busbw, 2.0), rng.normal(1980.0, 8.0)
            for t in range(5):
                at = f"2026-01-01T00:0{t}:00Z"
                lines.append(f"{group}-{n:03d},{group},nccl_busbw_gbps,"
                             f"{rng.normal(node_busbw, 1.0):.2f},{at},gb200")  # fmt: skip
                lines.append(f"{group}-{n:03d},{group},sm_clock_mhz,"
                             f"{rng.normal(node_clock, 4.0):.1f},{at},gb200")  # fmt: skip
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_default_policy_judges_the_metrics_reported_and_names_the_others(
    tmp_path: Path,
) -> None:
    """Issue 31: a healthy A/A sample of only the metrics the agents have passes the packaged
    policy; the metrics nobody reported are named, not held against the update."""
    code, out = run("gate", "evaluate", "--samples", str(_aa_sample(tmp_path / "aa.csv")), "--json")
    assert code == 0, out
    decision = json.loads(out)
    assert decision["verdict"] == "passed"
    judged = {m["metric"]: m["outcome"] for m in decision["metrics"]}
    assert judged["nccl_busbw_gbps"] == judged["sm_clock_mhz"] == "passed"
    assert judged["gpu_power_w"] == "not_reported"
    assert (
        "not judged (no node reported them): gpu_temperature_c, gpu_power_w" in (decision["reason"])
    )
    # The same agents, a canary 5% slower on busbw: what was reported is still judged.
    slow = _aa_sample(tmp_path / "slow.csv", canary_busbw=359.0)
    code, out = run("gate", "evaluate", "--samples", str(slow), "--json")
    assert code == 1 and "critical metric nccl_busbw_gbps worse" in json.loads(out)["reason"]


def test_at_re_derives_the_verdict_as_of_an_earlier_time() -> None:
    file = str(DATA / "fatal_xid.json")
    code, _ = run(
        "gate", "evaluate", "--samples", file, "--policy", POLICY, "--at", "2026-01-01T00:00:20Z"
    )
    assert code == 0  # the XID came at 00:00:25


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--samples", "/nonexistent.csv"], "samples /nonexistent.csv: cannot be read"),
        (
            ["--samples", str(DATA / "healthy.csv"), "--policy", "/nonexistent.toml"],
            "cannot be read",
        ),
        (["--samples", str(DATA / "policy.toml")], "unknown field(s)"),
        (
            ["--samples", str(DATA / "healthy.csv"), "--policy", str(DATA / "healthy.csv")],
            "not valid TOML",
        ),
        (
            ["--samples", str(DATA / "healthy.csv"), "--at", "noon"],
            "--at 'noon' is not an ISO 8601 time",
        ),
        (
            ["--samples", str(DATA / "healthy.csv"), "--at", "2026-01-01T00:00:00"],
            "has no time zone",
        ),
    ],
)
def test_bad_input_exits_2_with_one_line_and_no_traceback(args: list[str], says: str) -> None:
    result = runner.invoke(app, ["gate", "evaluate", *args])
    assert result.exit_code == 2
    assert says in result.output and "Traceback" not in result.output
    assert result.output.startswith("error: ")


def test_a_bad_row_is_named_by_its_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("node,group,metric,value,time\nn1,canary,m,1,0\nn2,treated,m,1,0\n")
    code, out = run("gate", "evaluate", "--samples", str(bad))
    assert code == 2 and "line 3: group 'treated' is neither canary nor control" in out


def test_bench_reports_parts_b_and_d_and_leaves_the_ingest_parts_out() -> None:
    result = run_bench(
        BenchOptions(
            nodes=40,
            samples_per_node=5,
            runs=1,
            aa_trials=5,
            detection_trials=5,
            environmental_trials=5,
        )
    )
    assert {"eval_s", "aa_false_trip_rate", "detection_rate", "environmental_blamed"} <= set(result)
    assert not {"ingest_ratio", "trip_p99_ms"} & set(result)
    assert result["detection_rate"] == 1.0 and result["aa_false_trip_rate"] == 0.0
    assert result["environmental_blamed"] == 0 and 0 < result["eval_s"] < 10
    assert result["metrics"] == 10 and result["rows"] == 80 * 11 * 5


def test_bench_command_prints_json() -> None:
    code, out = run(
        "bench",
        "gate",
        "--nodes",
        "20",
        "--samples-per-node",
        "3",
        "--runs",
        "1",
        "--aa-trials",
        "2",
        "--detection-trials",
        "2",
        "--environmental-trials",
        "2",
        "--judge-only",
        "--json",
    )
    assert code == 0, out
    assert json.loads(out)["aa_trials"] == 2
