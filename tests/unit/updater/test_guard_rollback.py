"""The blast-radius check for a flip back to the previous bank (domain/guard.py): the halt
that asked for it and a spent failure budget do not stop it; every other check still does."""

from __future__ import annotations

import dataclasses

import pytest

from lockstep_updater.domain.guard import Verdict, decide
from tests.unit.updater.test_guard import OK

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("change", [{"halted": "gate tripped on wave 0"}, {"failures": 3}])
def test_a_halt_or_a_spent_failure_budget_does_not_stop_a_flip_back(
    change: dict[str, object],
) -> None:
    facts = dataclasses.replace(OK, **change)  # type: ignore[arg-type]
    assert decide(facts, takes_out_of_service=True).verdict is Verdict.HALT
    assert decide(facts, takes_out_of_service=True, rollback=True).verdict is Verdict.PROCEED


@pytest.mark.parametrize(
    ("change", "verdict", "reason"),
    [
        ({"node_id": "node-3", "in_wave": False}, Verdict.REFUSE, "node-3 is not in the wave"),
        ({"in_plan": False}, Verdict.REFUSE, "not in the approved plan"),
        ({"wave_released": False}, Verdict.REFUSE, "the wave was not released"),
        ({"others_out": 2}, Verdict.WAIT, "max_unavailable 2"),
    ],
)
def test_a_flip_back_stays_inside_the_wave_the_plan_and_the_pool_budget(
    change: dict[str, object], verdict: Verdict, reason: str
) -> None:
    facts = dataclasses.replace(OK, halted="gate tripped on wave 0", **change)  # type: ignore[arg-type]
    decision = decide(facts, takes_out_of_service=True, rollback=True)
    assert decision.verdict is verdict and reason in decision.reason
