"""Properties of the whole gate on synthetic fleets of any size the policy allows."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import hypothesis
import numpy as np
import pytest
from hypothesis import strategies as st

from lockstep_common.vocabulary import GateVerdict
from lockstep_gate.judge import evaluate
from lockstep_gate.policy import Policy
from lockstep_gate.policy_files import default_policy
from lockstep_gate.samples import SampleTable
from lockstep_healthgate.testing.synthetic import (
    EXPECTED_BUSBW,
    Scenario,
    end_of_soak,
    generate,
)

pytestmark = pytest.mark.unit
POLICY: Policy = default_policy().model_copy(
    update={"expected": {"all": {"nccl_busbw_gbps": EXPECTED_BUSBW}}}
)
seeds = st.integers(0, 2**32 - 1)
canaries = st.integers(POLICY.minimum.canary_nodes, 60)
controls = st.integers(POLICY.minimum.control_nodes, 300)
samples = st.integers(POLICY.minimum.samples_per_node, 12)


def judge(scenario: Scenario, seed: int) -> GateVerdict:
    table = generate(scenario, np.random.default_rng(seed))
    now = datetime.fromtimestamp(end_of_soak(scenario), UTC)
    return evaluate(table, POLICY, now=now).verdict


@hypothesis.settings(max_examples=20, deadline=None)
@hypothesis.given(seeds, canaries, controls, samples)
def test_a_a_trials_trip_at_most_rarely(seed: int, canary: int, control: int, per: int) -> None:
    # With these floors the false-trip rate is far below 1%: one trip in ten would mean a bug.
    scenario = Scenario(canary=canary, control=control, samples_per_node=per)
    rng = np.random.default_rng(seed)
    verdicts = [judge(scenario, int(rng.integers(2**32))) for _ in range(10)]
    assert verdicts.count(GateVerdict.TRIPPED) <= 1


@hypothesis.settings(max_examples=20, deadline=None)
@hypothesis.given(seeds, st.integers(20, 60), st.integers(50, 300), samples, st.floats(0.80, 0.90))
def test_a_large_busbw_drop_on_the_canary_always_trips(
    seed: int, canary: int, control: int, per: int, factor: float
) -> None:
    scenario = Scenario(
        canary=canary,
        control=control,
        samples_per_node=per,
        canary_effect={"nccl_busbw_gbps": factor},
    )
    assert judge(scenario, seed) is GateVerdict.TRIPPED


@hypothesis.settings(max_examples=20, deadline=None)
@hypothesis.given(seeds, st.integers(1, POLICY.minimum.canary_nodes - 1), controls, samples)
def test_too_few_canary_nodes_never_pass(seed: int, canary: int, control: int, per: int) -> None:
    scenario = Scenario(canary=canary, control=control, samples_per_node=per)
    assert judge(scenario, seed) is not GateVerdict.PASSED


@hypothesis.settings(max_examples=20, deadline=None)
@hypothesis.given(seeds, st.floats(0.80, 0.96))
def test_a_fleet_wide_busbw_drop_is_never_blamed_on_the_rollout(seed: int, factor: float) -> None:
    scenario = Scenario(
        canary=50,
        control=500,
        samples_per_node=10,
        fleet_effect={"nccl_busbw_gbps": factor},
        baseline=True,
    )
    assert judge(scenario, seed) is not GateVerdict.TRIPPED


@hypothesis.settings(max_examples=15, deadline=None)
@hypothesis.given(seeds, st.randoms(use_true_random=False))
def test_the_decision_does_not_depend_on_row_order(seed: int, shuffle: random.Random) -> None:
    scenario = Scenario(
        canary=8, control=20, samples_per_node=4, canary_effect={"gpu_power_w": 1.1}
    )
    table = generate(scenario, np.random.default_rng(seed))
    order = list(range(table.rows))
    shuffle.shuffle(order)
    index = np.array(order)
    shuffled = SampleTable.from_columns(
        nodes=list(table.nodes),
        canary=table.node_canary,
        node_strata=[table.strata[s] for s in table.node_stratum],
        metrics=list(table.metrics),
        node=table.node[index],
        metric=table.metric[index],
        value=table.value[index],
        time=table.time[index],
        baseline=table.baseline[index],
    )
    now = datetime.fromtimestamp(end_of_soak(scenario), UTC)
    assert evaluate(shuffled, POLICY, now=now) == evaluate(table, POLICY, now=now)
