"""The packaged change classes and the packaged gate policy work together: every class's canary
(and the as many controls the planner picks beside it) is enough for the gate to judge, so a
rollout under packaged policies is never held "too little data" by construction (issue 31)."""

from __future__ import annotations

import pytest

from lockstep_common.vocabulary import ChangeClass
from lockstep_gate.policy_files import default_policy
from lockstep_planner.adapters.policy_file import packaged_policy

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("change_class", list(ChangeClass))
def test_every_packaged_class_picks_what_the_packaged_gate_needs(
    change_class: ChangeClass,
) -> None:
    gate = default_policy().minimum
    canary = packaged_policy()[change_class].canary_min_per_stratum
    # The planner picks as many untouched controls as canary nodes, per stratum (canary.py).
    assert canary >= gate.canary_nodes, f"{change_class}: canary {canary} < {gate.canary_nodes}"
    assert canary >= gate.control_nodes, f"{change_class}: controls {canary} < {gate.control_nodes}"
