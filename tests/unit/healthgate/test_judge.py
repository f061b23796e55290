"""The judge on known distributions: what trips, what passes, what is inconclusive, and why."""

from __future__ import annotations

import random

import numpy as np
import pytest

from lockstep_common.vocabulary import GateVerdict
from lockstep_gate.decision import MetricOutcome
from lockstep_gate.judge import evaluate
from lockstep_gate.samples import Group, Phase, Sample, SampleTable
from tests.unit.healthgate.fleets import (
    BUSBW,
    TEMP,
    XIDS,
    at,
    end,
    fleet,
    normal_nodes,
    policy,
    series,
)

pytestmark = pytest.mark.unit
NAME = BUSBW.name


def busbw(rng: np.random.Generator, nodes: int, center: float) -> list[list[float]]:
    return normal_nodes(rng, nodes, center, node_sd=4.0, sample_sd=2.0)


def test_a_shifted_normal_in_the_harmful_direction_trips_on_a_critical_metric() -> None:
    rng = np.random.default_rng(1)
    table = fleet({NAME: (busbw(rng, 20, 360.0), busbw(rng, 40, 378.0))})
    decision = evaluate(table, policy(), now=end(table))
    assert decision.verdict is GateVerdict.TRIPPED
    [judged] = decision.metrics
    assert judged.outcome is MetricOutcome.WORSE
    c = judged.comparison
    assert c is not None and c.high < -c.floor and c.low < -18 < c.high
    assert "critical metric nccl_busbw_gbps worse" in decision.reason
    assert set(decision.offending_nodes) <= {f"canary-{i:03d}" for i in range(20)}
    assert len(decision.offending_nodes) >= 15


def test_the_decision_keeps_the_deciles_of_the_distributions_it_compared() -> None:
    # What `gate show --json` and the console plot: the per-node values the judge compared,
    # as 11 percentiles, in order, bracketing the medians it reports.
    rng = np.random.default_rng(1)
    table = fleet({NAME: (busbw(rng, 20, 360.0), busbw(rng, 40, 378.0))})
    [judged] = evaluate(table, policy(), now=end(table)).metrics
    c = judged.comparison
    assert c is not None
    for deciles, median in (
        (c.canary_deciles, c.canary_median),
        (c.control_deciles, c.control_median),
    ):
        assert len(deciles) == 11
        assert list(deciles) == sorted(deciles)
        assert deciles[5] == pytest.approx(median)
    assert c.canary_deciles[5] < c.control_deciles[5] - 10  # the canary's busbw is lower


def test_the_same_shift_in_the_harmless_direction_passes() -> None:
    rng = np.random.default_rng(1)
    table = fleet({NAME: (busbw(rng, 20, 396.0), busbw(rng, 40, 378.0))})
    assert evaluate(table, policy(), now=end(table)).verdict is GateVerdict.PASSED


def test_a_significant_shift_smaller_than_the_floor_passes() -> None:
    rng = np.random.default_rng(2)
    canary = normal_nodes(rng, 200, 374.0, node_sd=1.0, sample_sd=0.5)
    control = normal_nodes(rng, 400, 378.0, node_sd=1.0, sample_sd=0.5)  # 1% lower: floor is 2%
    decision = evaluate(fleet({NAME: (canary, control)}), policy(), now=at(2e9))
    [judged] = decision.metrics
    assert judged.comparison is not None and judged.comparison.p_value is not None
    assert judged.comparison.p_value < 1e-6
    assert decision.verdict is GateVerdict.PASSED


def test_identical_distributions_pass() -> None:
    rng = np.random.default_rng(3)
    table = fleet({NAME: (busbw(rng, 30, 378.0), busbw(rng, 60, 378.0))})
    decision = evaluate(table, policy(), now=end(table))
    assert decision.verdict is GateVerdict.PASSED
    assert decision.reason == "every reported metric within its floor and no hard rule broken"


def test_constant_series_equal_on_both_sides_pass() -> None:
    table = fleet({NAME: ([[370.0] * 4] * 6, [[370.0] * 4] * 8)})
    decision = evaluate(table, policy(), now=end(table))
    [judged] = decision.metrics
    assert decision.verdict is GateVerdict.PASSED
    assert judged.comparison is not None and judged.comparison.p_value == 1.0
    assert (judged.comparison.low, judged.comparison.high) == (0.0, 0.0)


def test_constant_series_apart_by_more_than_the_floor_are_worse() -> None:
    table = fleet({TEMP.name: ([[70.0] * 4] * 6, [[60.0] * 4] * 8)})
    decision = evaluate(table, policy(TEMP), now=end(table))
    assert decision.metrics[0].outcome is MetricOutcome.WORSE
    assert decision.metrics[0].comparison is not None
    assert decision.metrics[0].comparison.shift == 10.0


def test_ties_in_counters_do_not_make_a_difference_out_of_nothing() -> None:
    rng = np.random.default_rng(4)
    canary = [list(rng.poisson(0.01, 10).astype(float)) for _ in range(50)]
    control = [list(rng.poisson(0.01, 10).astype(float)) for _ in range(200)]
    decision = evaluate(fleet({XIDS.name: (canary, control)}), policy(XIDS), now=at(2e9))
    assert decision.verdict is GateVerdict.PASSED


def test_a_counter_rising_on_the_canary_is_worse_even_when_most_reports_are_zero() -> None:
    rng = np.random.default_rng(5)
    canary = [list(rng.poisson(0.3, 10).astype(float)) for _ in range(50)]
    control = [list(rng.poisson(0.01, 10).astype(float)) for _ in range(200)]
    decision = evaluate(fleet({XIDS.name: (canary, control)}), policy(XIDS), now=at(2e9))
    assert decision.metrics[0].outcome is MetricOutcome.WORSE  # mean per node, outliers kept


def test_missing_values_are_removed_for_gauges() -> None:
    rng = np.random.default_rng(6)
    canary = busbw(rng, 10, 378.0)
    for node in canary:
        node[1], node[3] = float("nan"), float("inf")
    table = fleet({NAME: (canary, busbw(rng, 10, 378.0))})
    decision = evaluate(table, policy(), now=end(table))
    assert decision.verdict is GateVerdict.PASSED
    assert decision.metrics[0].comparison is not None
    assert decision.metrics[0].comparison.canary_nodes == 10  # 3 samples left each: enough


def test_missing_values_leaving_too_few_samples_make_the_node_not_count() -> None:
    rng = np.random.default_rng(6)
    canary = busbw(rng, 10, 378.0)
    for node in canary[:6]:
        node[0] = node[1] = node[2] = float("nan")  # 2 samples left: under samples_per_node
    table = fleet({NAME: (canary, busbw(rng, 10, 378.0))})
    decision = evaluate(table, policy(), now=end(table))
    assert decision.verdict is GateVerdict.INCONCLUSIVE
    assert "canary 4 node(s) (need 5)" in decision.metrics[0].detail


def test_missing_counter_values_count_as_zero() -> None:
    canary = [[float("nan"), 1.0, 1.0, float("nan")] for _ in range(8)]  # mean 0.5 with zeros
    control = [[0.0, 0.0, 0.0, 0.0] for _ in range(8)]
    decision = evaluate(fleet({XIDS.name: (canary, control)}), policy(XIDS), now=at(2e9))
    c = decision.metrics[0].comparison
    assert c is not None and c.canary_median == 0.5


def test_a_spike_within_one_node_is_an_outlier_not_a_regression() -> None:
    rng = np.random.default_rng(7)
    canary = busbw(rng, 10, 378.0)
    for node in canary:
        node[2] = 10.0  # one collided all_reduce run per node
    table = fleet({NAME: (canary, busbw(rng, 10, 378.0))})
    assert evaluate(table, policy(), now=end(table)).verdict is GateVerdict.PASSED


@pytest.mark.parametrize(("canary", "control"), [(2, 40), (40, 2), (0, 40)])
def test_too_little_data_is_never_a_pass_even_when_values_look_fine(
    canary: int, control: int
) -> None:
    rng = np.random.default_rng(8)
    rows = series(Group.CONTROL, NAME, busbw(rng, control, 378.0))
    rows += series(Group.CANARY, NAME, busbw(rng, canary, 378.0))
    rows += series(Group.CANARY, TEMP.name, [[60.0] * 5] * 6)  # canary nodes exist either way
    rows += series(Group.CONTROL, TEMP.name, [[60.0] * 5] * 6, prefix="other")
    table = SampleTable.from_rows(rows)
    decision = evaluate(table, policy(BUSBW), now=end(table))
    assert decision.verdict is GateVerdict.INCONCLUSIVE
    assert decision.metrics[0].outcome is MetricOutcome.NO_DATA
    assert "too little data for nccl_busbw_gbps" in decision.reason


def test_no_canary_samples_at_all_is_inconclusive() -> None:
    rows = series(Group.CONTROL, NAME, [[378.0] * 5] * 10)
    decision = evaluate(SampleTable.from_rows(rows), policy(), now=at(2e9))
    assert decision.verdict is GateVerdict.INCONCLUSIVE
    assert decision.metrics[0].detail == "too little data: no canary samples"


def test_a_metric_nobody_reported_is_named_and_not_judged() -> None:
    """An agent that does not measure a metric says nothing about the update: the gate judges
    what was reported and says which it could not (issue 31)."""
    rng = np.random.default_rng(9)
    table = fleet({NAME: (busbw(rng, 10, 378.0), busbw(rng, 10, 378.0))})
    decision = evaluate(table, policy(BUSBW, TEMP), now=end(table))
    assert decision.verdict is GateVerdict.PASSED, decision.reason
    outcomes = [j.outcome for j in decision.metrics]
    assert outcomes == [MetricOutcome.PASSED, MetricOutcome.NOT_REPORTED]
    assert "not judged (no node reported them): gpu_temperature_c" in decision.reason
    assert decision.score == 100.0


def test_a_required_metric_nobody_reported_is_no_data() -> None:
    rng = np.random.default_rng(9)
    table = fleet({NAME: (busbw(rng, 10, 378.0), busbw(rng, 10, 378.0))})
    required = TEMP.model_copy(update={"required": True})
    decision = evaluate(table, policy(BUSBW, required), now=end(table))
    assert decision.verdict is GateVerdict.INCONCLUSIVE
    assert [j.outcome for j in decision.metrics] == [MetricOutcome.PASSED, MetricOutcome.NO_DATA]


def test_a_metric_the_control_reports_but_the_canary_does_not_is_no_data() -> None:
    """The update may have broken what reports it: that is never a pass."""
    rng = np.random.default_rng(9)
    temps: tuple[list[list[float]], list[list[float]]] = ([], [[60.0] * 5] * 10)
    table = fleet({NAME: (busbw(rng, 10, 378.0), busbw(rng, 10, 378.0)), TEMP.name: temps})
    decision = evaluate(table, policy(BUSBW, TEMP), now=end(table))
    assert decision.verdict is GateVerdict.INCONCLUSIVE
    assert "too little data for gpu_temperature_c" in decision.reason


def test_no_metric_reported_at_all_is_never_a_pass() -> None:
    rng = np.random.default_rng(9)
    table = fleet({TEMP.name: (busbw(rng, 10, 60.0), busbw(rng, 10, 60.0))})
    decision = evaluate(table, policy(BUSBW), now=end(table))
    assert decision.verdict is GateVerdict.INCONCLUSIVE
    assert "no metric of the policy was reported" in decision.reason


def test_samples_after_now_are_not_considered() -> None:
    rng = np.random.default_rng(10)
    late = series(Group.CANARY, NAME, [[300.0] * 5] * 10, start=1e10)  # after the evaluation
    table = fleet({NAME: (busbw(rng, 10, 378.0), busbw(rng, 10, 378.0))}, extra=late)
    assert evaluate(table, policy(), now=at(1e10 - 1)).verdict is GateVerdict.PASSED
    assert evaluate(table, policy(), now=at(2e10)).verdict is GateVerdict.TRIPPED


def test_strata_are_judged_apart_and_a_worse_one_trips() -> None:
    rng = np.random.default_rng(11)
    rows: list[Sample] = []
    for stratum, canary_level in (("h100", 378.0), ("gb200", 340.0)):
        rows += series(
            Group.CANARY, NAME, busbw(rng, 10, canary_level), prefix=f"c-{stratum}", stratum=stratum
        )
        rows += series(
            Group.CONTROL, NAME, busbw(rng, 10, 378.0), prefix=f"k-{stratum}", stratum=stratum
        )
    decision = evaluate(SampleTable.from_rows(rows), policy(), now=at(2e9))
    outcome = {j.stratum: j.outcome for j in decision.metrics}
    assert outcome == {"gb200": MetricOutcome.WORSE, "h100": MetricOutcome.PASSED}
    assert decision.verdict is GateVerdict.TRIPPED
    assert all(n.startswith("c-gb200") for n in decision.offending_nodes)


def test_a_stratum_without_its_own_control_is_no_data() -> None:
    rng = np.random.default_rng(12)
    rows = series(Group.CANARY, NAME, busbw(rng, 10, 378.0), stratum="gb200")
    rows += series(Group.CONTROL, NAME, busbw(rng, 10, 378.0), stratum="h100")
    decision = evaluate(SampleTable.from_rows(rows), policy(), now=at(2e9))
    assert decision.verdict is GateVerdict.INCONCLUSIVE
    assert [(j.stratum, j.outcome) for j in decision.metrics] == [("gb200", MetricOutcome.NO_DATA)]


def test_a_worse_non_critical_metric_holds_and_enough_weight_trips() -> None:
    rng = np.random.default_rng(13)
    hot = [[75.0 + rng.normal()] * 5 for _ in range(10)]
    cool = [[60.0 + rng.normal()] * 5 for _ in range(10)]
    table = fleet({NAME: (busbw(rng, 10, 378.0), busbw(rng, 10, 378.0)), TEMP.name: (hot, cool)})
    held = evaluate(table, policy(BUSBW, TEMP), now=end(table))  # weight 1 of 4 worse: 75
    assert held.verdict is GateVerdict.INCONCLUSIVE
    assert held.score == 75.0 and "score 75 below pass 100 (gpu_temperature_c)" in held.reason
    heavy = TEMP.model_copy(update={"weight": 3.0})
    tripped = evaluate(table, policy(BUSBW, heavy), now=end(table))  # 3 of 6 worse: 50
    assert tripped.verdict is GateVerdict.TRIPPED and tripped.score == 50.0


def test_fleet_wide_degradation_against_baselines_is_environmental_not_tripped() -> None:
    rng = np.random.default_rng(14)
    rows: list[Sample] = []
    for group, n in ((Group.CANARY, 10), (Group.CONTROL, 20)):
        levels = 378.0 + 4.0 * rng.standard_normal(n)
        before = [list(lv + 2 * rng.standard_normal(5)) for lv in levels]
        after = [list(0.9 * lv + 2 * rng.standard_normal(5)) for lv in levels]
        rows += series(group, NAME, before, phase=Phase.BASELINE, start=0.0)
        rows += series(group, NAME, after, start=1000.0)
    table = SampleTable.from_rows(rows)
    decision = evaluate(table, policy(), now=end(table))
    [judged] = decision.metrics
    assert judged.outcome is MetricOutcome.ENVIRONMENTAL
    assert judged.environment is not None and judged.environment.reference == "baseline"
    assert decision.verdict is GateVerdict.INCONCLUSIVE
    assert "environmental: control degraded like the canary in nccl_busbw_gbps" in decision.reason


def test_fleet_wide_degradation_against_expected_values_is_environmental() -> None:
    rng = np.random.default_rng(15)
    table = fleet({NAME: (busbw(rng, 10, 340.0), busbw(rng, 20, 340.0))})
    rules = policy(expected={"all": {NAME: 378.0}})
    decision = evaluate(table, rules, now=end(table))
    assert decision.metrics[0].outcome is MetricOutcome.ENVIRONMENTAL
    assert decision.metrics[0].environment is not None
    assert decision.metrics[0].environment.reference == "expected"
    assert decision.verdict is GateVerdict.INCONCLUSIVE


def test_only_the_canary_degraded_against_its_baseline_is_the_rollout() -> None:
    rng = np.random.default_rng(16)
    rows: list[Sample] = []
    for group, n, factor in ((Group.CANARY, 10, 0.9), (Group.CONTROL, 20, 1.0)):
        levels = 378.0 + 4.0 * rng.standard_normal(n)
        rows += series(
            group,
            NAME,
            [list(lv + rng.standard_normal(5)) for lv in levels],
            phase=Phase.BASELINE,
            start=0.0,
        )
        rows += series(
            group, NAME, [list(factor * lv + rng.standard_normal(5)) for lv in levels], start=1000.0
        )
    decision = evaluate(SampleTable.from_rows(rows), policy(), now=at(2000.0))
    env = decision.metrics[0].environment
    assert env is not None and env.canary_degraded and not env.control_degraded
    assert decision.verdict is GateVerdict.TRIPPED


def test_the_decision_is_the_same_whatever_the_order_of_the_rows() -> None:
    rng = np.random.default_rng(17)
    rows: list[Sample] = []
    rows += series(Group.CANARY, NAME, busbw(rng, 12, 365.0))
    rows += series(Group.CONTROL, NAME, busbw(rng, 30, 378.0))
    rows += series(Group.CANARY, TEMP.name, [[62.0 + rng.normal()] * 5 for _ in range(12)])
    rows += series(Group.CONTROL, TEMP.name, [[62.0 + rng.normal()] * 5 for _ in range(30)])
    first = evaluate(SampleTable.from_rows(rows), policy(BUSBW, TEMP), now=at(2e9))
    random.Random(3).shuffle(rows)
    again = evaluate(SampleTable.from_rows(rows), policy(BUSBW, TEMP), now=at(2e9))
    assert again == first
