"""``lockstep bench rollout``: the lower bound it divides by, and one clear line for bad input
(the whole rollout runs in tests/e2e/test_bench_rollout.py)."""

from __future__ import annotations

import resource
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lockstep_bench.rollout import RolloutOptions, gate_policy, lower_bound, planner_policy
from lockstep_cli.main import app
from lockstep_common.vocabulary import ChangeClass
from lockstep_gate.policy_files import load_policy
from lockstep_planner.adapters.policy_file import read_policy

pytestmark = pytest.mark.unit


def test_the_bound_is_one_staging_the_activation_rounds_of_the_fullest_pool_and_the_soak() -> None:
    opts = RolloutOptions(nodes=200, time_scale=0.1)  # GPU VBIOS: 6 s staging, 2 s activation
    assert (opts.stage_s, opts.activate_s) == pytest.approx((6.0, 2.0))
    pool_of = {f"n{i}": ("a" if i < 7 else "b") for i in range(10)}
    waves = [
        {"node_ids": ["n0", "n7"], "max_unavailable": 3, "soak_s": 4},  # one round
        # pool a holds 5 of these: two rounds of 3; pool b's 3 fit in one
        {"node_ids": [f"n{i}" for i in range(1, 10) if i != 7], "max_unavailable": 3, "soak_s": 5},
    ]
    total, parts = lower_bound(waves, pool_of, opts)
    assert parts == [6 + 2 + 4, 6 + 2 * 2 + 5]
    assert total == sum(parts)


def test_soaks_leave_room_for_the_gates_samples_at_the_agents_cadence() -> None:
    small, big = RolloutOptions(nodes=200), RolloutOptions(nodes=12_500)
    assert small.cadence_s == 1.0 and big.cadence_s == 50.0  # 250 reports/s over the fleet
    assert small.soak_s >= 3 * small.cadence_s and big.soak_s >= 3 * big.cadence_s
    assert big.budget(3) == 417  # 10% of a pool


def test_the_policies_it_writes_are_valid(tmp_path: Path) -> None:
    opts = RolloutOptions(nodes=200)
    classes = read_policy(planner_policy(tmp_path / "classes.yaml", opts.soak_s))
    routine = classes[ChangeClass.ROUTINE]
    assert (routine.canary_soak_s, routine.wave_soak_s) == (opts.soak_s, opts.soak_s)
    gate = load_policy(gate_policy(tmp_path / "gate.toml", opts.cadence_s))
    assert gate.minimum.canary_nodes == 5
    assert gate.hard_rules.heartbeat_interval_s == opts.cadence_s
    assert gate.hard_rules.heartbeat_missed_intervals == 5


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--nodes", "0"], "--nodes must be at least 12"),
        (["--nodes", "11"], "--nodes must be at least 12"),
        (["--time-scale", "0"], "--time-scale must be > 0"),
        (["--report-rate", "-1"], "--report-rate must be > 0"),
        (["--updaters", "0"], "--updaters must be 1 to 8, not 0"),
        (["--updaters", "9"], "--updaters must be 1 to 8, not 9"),
    ],
)
def test_bad_input_is_one_line_and_a_nonzero_exit(args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, ["bench", "rollout", *args, "--json"])
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_a_fleet_the_open_file_limit_cannot_hold_is_refused_before_anything_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each node is a BMC listener and its agent's own NATS connection in the bench's process:
    12,500 nodes under a 20,000 hard limit died on EMFILE mid-setup; now one line, nothing run."""

    def no_raise(which: int, value: tuple[int, int]) -> None:
        raise ValueError("not allowed to raise the maximum limit")

    monkeypatch.setattr(resource, "getrlimit", lambda which: (20_000, 20_000))
    monkeypatch.setattr(resource, "setrlimit", no_raise)
    result = CliRunner().invoke(app, ["bench", "rollout", "--nodes", "12500", "--updaters", "2"])
    assert result.exit_code == 1
    assert result.output.strip() == (
        "error: --nodes 12500: 33704 file descriptors needed, hard limit is 20000 (ulimit -Hn)"
    )
