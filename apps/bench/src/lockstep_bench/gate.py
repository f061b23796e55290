"""``lockstep bench gate``: the healthgate judge's speed and quality on synthetic fleets generated
in the same run (issue 11, benchmark parts b and d).

(b) ``eval_s``: one evaluation (hard rules, per-node aggregation, every metric's comparison and
environmental check, the verdict) of a wave of ``nodes`` canary against ``nodes`` control nodes
with the default policy's 10 metrics and heartbeats, ``samples_per_node`` samples each; the median
over ``runs``. Generating the samples is not timed. ``eval_with_baseline_s`` is the same with
baseline samples, so that the environmental check compares each group with its own past.

(d) Trials of 50 canary against 500 control nodes, 10 samples each (100 s of soak at 10 s), with
a fresh fleet per trial from one seeded generator:

- A/A: nothing changes; a trip is a false trip (``aa_false_trip_rate``).
- Detection: the canary's busbw drops by 5%; a trip is a detection (``detection_rate``).
- Environmental: busbw drops by 3% to 15% on every node, baseline samples included; a trip
  blames the rollout for what it did not cause (``environmental_blamed``, a count).

The parts that need the service's ingest, (a) ``ingest_ratio`` and (c) ``trip_p99_ms``, are not
measured here.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np

from lockstep_common.vocabulary import GateVerdict
from lockstep_gate.decision import GateDecision
from lockstep_gate.hard_rules import BUSBW
from lockstep_gate.judge import evaluate
from lockstep_gate.policy import Policy
from lockstep_gate.policy_files import default_policy
from lockstep_gate.samples import DEFAULT_STRATUM
from lockstep_healthgate.testing.synthetic import EXPECTED_BUSBW, Scenario, end_of_soak, generate

TRIAL = Scenario(canary=50, control=500, samples_per_node=10)
REGRESSION = 0.95  # the canary's busbw factor in detection trials
FLEET_DROP = (0.85, 0.97)  # range of the fleet-wide busbw factor in environmental trials


@dataclass(frozen=True)
class BenchOptions:
    """What to run."""

    nodes: int = 2500
    samples_per_node: int = 30
    runs: int = 3
    aa_trials: int = 1000
    detection_trials: int = 1000
    environmental_trials: int = 500
    seed: int = 0


def bench_policy() -> Policy:
    """The default policy with the synthetic fleet's expected busbw (the busbw rule's bar)."""
    return default_policy().model_copy(
        update={"expected": {DEFAULT_STRATUM: {BUSBW: EXPECTED_BUSBW}}}
    )


def _judge(scenario: Scenario, policy: Policy, rng: np.random.Generator) -> GateDecision:
    table = generate(scenario, rng)
    return evaluate(table, policy, now=datetime.fromtimestamp(end_of_soak(scenario), UTC))


def _eval_seconds(scenario: Scenario, policy: Policy, runs: int, seed: int) -> tuple[float, int]:
    table = generate(scenario, np.random.default_rng(seed))
    now = datetime.fromtimestamp(end_of_soak(scenario), UTC)
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        evaluate(table, policy, now=now)
        times.append(time.perf_counter() - started)
    return statistics.median(times), table.rows


def _rates(decisions: list[GateVerdict]) -> dict[GateVerdict, float]:
    return {v: decisions.count(v) / len(decisions) for v in GateVerdict}


def run_bench(opts: BenchOptions) -> dict[str, Any]:
    """Every figure of parts (b) and (d), with the raw counts beside the rates."""
    policy = bench_policy()
    big = Scenario(canary=opts.nodes, control=opts.nodes, samples_per_node=opts.samples_per_node)
    eval_s, rows = _eval_seconds(big, policy, opts.runs, opts.seed)
    with_baseline = Scenario(
        canary=opts.nodes, control=opts.nodes, samples_per_node=opts.samples_per_node, baseline=True
    )
    eval_baseline_s, _ = _eval_seconds(with_baseline, policy, opts.runs, opts.seed)

    rng = np.random.default_rng(opts.seed)
    started = time.perf_counter()
    aa = [_judge(TRIAL, policy, rng).verdict for _ in range(opts.aa_trials)]
    regression = Scenario(
        canary=TRIAL.canary,
        control=TRIAL.control,
        samples_per_node=TRIAL.samples_per_node,
        canary_effect={BUSBW: REGRESSION},
    )
    detected = [_judge(regression, policy, rng).verdict for _ in range(opts.detection_trials)]
    fleet = []
    for _ in range(opts.environmental_trials):
        drop = float(rng.uniform(*FLEET_DROP))
        scenario = Scenario(
            canary=TRIAL.canary,
            control=TRIAL.control,
            samples_per_node=TRIAL.samples_per_node,
            fleet_effect={BUSBW: drop},
            baseline=True,
        )
        fleet.append(_judge(scenario, policy, rng).verdict)
    trials_s = time.perf_counter() - started
    aa_rates, det_rates, env_rates = _rates(aa), _rates(detected), _rates(fleet)
    return {
        "eval_s": round(eval_s, 4),
        "eval_with_baseline_s": round(eval_baseline_s, 4),
        "nodes": opts.nodes,
        "metrics": len(policy.metrics),
        "rows": rows,
        "runs": opts.runs,
        "aa_false_trip_rate": aa_rates[GateVerdict.TRIPPED],
        "aa_inconclusive_rate": aa_rates[GateVerdict.INCONCLUSIVE],
        "aa_trials": opts.aa_trials,
        "aa_tripped": aa.count(GateVerdict.TRIPPED),
        "detection_rate": det_rates[GateVerdict.TRIPPED],
        "detection_trials": opts.detection_trials,
        "detected": detected.count(GateVerdict.TRIPPED),
        "environmental_blamed": fleet.count(GateVerdict.TRIPPED),
        "environmental_flagged_rate": env_rates[GateVerdict.INCONCLUSIVE],
        "environmental_trials": opts.environmental_trials,
        "trial_canary_nodes": TRIAL.canary,
        "trial_control_nodes": TRIAL.control,
        "trial_samples_per_node": TRIAL.samples_per_node,
        "trials_s": round(trials_s, 1),
        "seed": opts.seed,
    }
