"""Rollout and wave lifecycles: the tables, their guard, exhaustively."""

from __future__ import annotations

import itertools
from enum import StrEnum

import pytest

from lockstep_common.errors import PermanentError
from lockstep_common.transitions import InvalidTransition
from lockstep_planner.domain.rollout import (
    ROLLOUT_ALLOWED,
    WAVE_ALLOWED,
    RolloutState,
    WaveState,
    transition,
    wave_transition,
)

pytestmark = pytest.mark.unit


def test_tables_cover_every_state() -> None:
    assert set(ROLLOUT_ALLOWED) == set(RolloutState)
    assert set(WAVE_ALLOWED) == set(WaveState)


@pytest.mark.parametrize(("current", "target"), list(itertools.product(RolloutState, RolloutState)))
def test_every_rollout_pair_is_allowed_or_raises(
    current: RolloutState, target: RolloutState
) -> None:
    if target in ROLLOUT_ALLOWED[current]:
        assert transition(current, target) is target
    else:
        with pytest.raises(
            InvalidTransition, match=f"rollout cannot go from {current} to {target}"
        ):
            transition(current, target)


@pytest.mark.parametrize(("current", "target"), list(itertools.product(WaveState, WaveState)))
def test_every_wave_pair_is_allowed_or_raises(current: WaveState, target: WaveState) -> None:
    if target in WAVE_ALLOWED[current]:
        assert wave_transition(current, target) is target
    else:
        with pytest.raises(InvalidTransition, match=f"wave cannot go from {current} to {target}"):
            wave_transition(current, target)


def _reachable(table: dict[StrEnum, frozenset[StrEnum]], start: StrEnum) -> set[StrEnum]:
    seen, frontier = {start}, [start]
    while frontier:
        for nxt in table[frontier.pop()] - seen:
            seen.add(nxt)
            frontier.append(nxt)
    return seen


def test_every_rollout_state_is_reachable_and_every_live_one_can_be_aborted() -> None:
    table: dict[StrEnum, frozenset[StrEnum]] = dict(ROLLOUT_ALLOWED)  # type: ignore[arg-type]
    assert _reachable(table, RolloutState.PLANNED) == set(RolloutState)
    finals = {s for s, nexts in ROLLOUT_ALLOWED.items() if not nexts}
    assert finals == {RolloutState.ABORTED, RolloutState.COMPLETED}
    for state in set(RolloutState) - finals:
        assert RolloutState.ABORTED in ROLLOUT_ALLOWED[state]


def test_gate_verdicts_map_to_rollout_moves() -> None:
    # passed -> continue; tripped -> halt at once; inconclusive -> pause for a human.
    assert RolloutState.HALTED in ROLLOUT_ALLOWED[RolloutState.RUNNING]
    assert RolloutState.PAUSED in ROLLOUT_ALLOWED[RolloutState.RUNNING]
    assert transition(RolloutState.PAUSED, RolloutState.RUNNING) is RolloutState.RUNNING
    with pytest.raises(PermanentError, match=r"allowed from halted: aborted\)"):
        transition(RolloutState.HALTED, RolloutState.RUNNING)


def test_every_wave_state_is_reachable_and_every_live_one_can_be_cancelled() -> None:
    table: dict[StrEnum, frozenset[StrEnum]] = dict(WAVE_ALLOWED)  # type: ignore[arg-type]
    assert _reachable(table, WaveState.PENDING) == set(WaveState)
    finals = {s for s, nexts in WAVE_ALLOWED.items() if not nexts}
    assert finals == {WaveState.PASSED, WaveState.TRIPPED, WaveState.TIMED_OUT, WaveState.CANCELLED}
    for state in set(WaveState) - finals:
        assert WaveState.CANCELLED in WAVE_ALLOWED[state]


def test_a_wave_is_never_passed_without_a_soak_and_a_finished_wave_never_moves() -> None:
    with pytest.raises(
        InvalidTransition, match=r"allowed from released: cancelled, soaking, timed_out, tripped\)"
    ):
        wave_transition(WaveState.RELEASED, WaveState.PASSED)
    with pytest.raises(InvalidTransition, match=r"allowed from passed: nothing\)") as err:
        wave_transition(WaveState.PASSED, WaveState.RELEASED)
    assert err.value.context == {"current": "passed", "target": "released"}
