"""The chaos test's invariant checks catch what they promise to (a guard needs its own test,
reliability.md family J): each is shown one history breaking it, and a clean one."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from lockstep_updater.ports import OWNER
from tests.integration.chaos.invariants import (
    Observation,
    Program,
    flashed_only_when_drained,
    never_regress,
    nothing_cordoned_without_reason,
    one_push_per_version,
    staged_from_attested,
    violations,
    waves_in_order,
    within_budget,
)

pytestmark = pytest.mark.unit
GOOD = "a" * 96


def push(at: float, **extra: Any) -> dict[str, Any]:
    entry = {"action": "update-multipart", "status": 202, "stage": True, "at": at}
    return {"plan": {"HGX_FW_GPU_0": "2.0"}, "sha384": GOOD, **entry, **extra}


def activate(at: float, state: str = "drained", by: str | None = OWNER) -> dict[str, Any]:
    return {
        "action": "UpdateService.Activate",
        "status": 202,
        "at": at,
        "scheduler_state": state,
        "drained_by": by,
    }


def observation(**changes: Any) -> Observation:
    base: dict[str, Any] = {
        "work": {"n0": (0, "done", ""), "n1": (1, "done", "")},
        "rollbacks": {},
        "rollout_state": "completed",
        "waves": {0: ("n0",), 1: ("n1",)},
        "gates": [("passed", 0, 10.0), ("passed", 1, 20.0)],
        "ledgers": {"n0": [push(1.0), activate(2.0)], "n1": [push(11.0), activate(12.0)]},
        "cordoned": {},
        "quarantined": frozenset(),
        "max_unavailable": 1,
        "attested_sha384": frozenset({GOOD}),
        "at_rest": True,
    }
    return Observation(**{**base, **changes})


def program() -> Program:
    return Program(1, uuid.uuid4(), {}, 0.0)


def test_a_clean_history_breaks_nothing() -> None:
    assert violations(program(), observation()) == []


def test_a_second_accepted_push_of_the_same_version_is_caught() -> None:
    seen = observation(ledgers={"n0": [push(1.0), push(3.0)], "n1": []})
    assert one_push_per_version(seen) == ["n0: 2 accepted pushes of version 2.0"]
    refused = {**push(3.0), "status": 503}  # a refused push is not a second one
    assert one_push_per_version(observation(ledgers={"n0": [push(1.0), refused]})) == []


def test_an_activation_on_a_node_not_drained_by_lockstep_is_caught() -> None:
    for state, by in (("idle", None), ("draining", OWNER), ("drained", "dc-ops")):
        seen = observation(ledgers={"n0": [activate(2.0, state, by)]})
        assert flashed_only_when_drained(seen) == [
            f"n0: UpdateService.Activate accepted while {state} (drained by {by})"
        ]
    unstaged = {**push(1.0), "stage": False, "scheduler_state": "idle", "drained_by": None}
    assert flashed_only_when_drained(observation(ledgers={"n0": [unstaged]})) != []


def test_more_nodes_out_of_a_pool_than_its_budget_is_caught_quarantined_ones_aside() -> None:
    seen = observation(cordoned={"n0": "batch", "n1": "batch"})
    assert within_budget(seen) == ["pool batch: 2 nodes out of service > max_unavailable 1"]
    assert within_budget(observation(cordoned=seen.cordoned, quarantined={"n1"})) == []


def test_a_touch_of_wave_1_before_wave_0_passed_is_caught() -> None:
    early = observation(ledgers={"n0": [], "n1": [push(5.0)]})
    assert waves_in_order(early) == [
        "n1 of wave 1 got update-multipart while wave 0's gate had not passed (before it passed)"
    ]
    never = observation(gates=[("tripped", 0, 10.0)], ledgers={"n1": [push(15.0)]})
    assert "and it never passed" in waves_in_order(never)[0]
    logins = [{"action": "session_create", "status": 201, "at": 1.0}]
    assert waves_in_order(observation(ledgers={"n1": logins})) == []  # reads are no touch


def test_a_terminal_state_that_changes_is_caught() -> None:
    p = program()
    assert never_regress(p, observation(rollout_state="halted")) == []
    assert never_regress(p, observation(work={"n0": (0, "staging", "")})) == [
        "n0: work item went from done back to staging",
        "rollout went from halted to completed",
    ]
    two = observation(gates=[("passed", 0, 1.0), ("tripped", 0, 2.0)])
    assert never_regress(program(), two) == ["wave 0: 2 gate verdicts"]


def test_a_flip_back_after_a_done_update_is_its_own_state_machine() -> None:
    # A tripped gate gives a canary node a second work item (kind rollback): its steps after
    # the update's `done` are not a regression, but its own ending must not regress either.
    p = program()
    flipping = observation(rollout_state="halted", rollbacks={"n0": (0, "staging", "")})
    assert never_regress(p, flipping) == []
    flipped = observation(rollout_state="halted", rollbacks={"n0": (0, "done", "")})
    assert never_regress(p, flipped) == []
    again = observation(rollout_state="halted", rollbacks={"n0": (0, "activating", "")})
    assert never_regress(p, again) == ["n0: flip-back item went from done back to activating"]


def test_a_node_left_cordoned_at_rest_without_a_failed_reason_is_caught() -> None:
    work = {"n0": (0, "done", ""), "n1": (1, "quarantined", "BMC did not come back")}
    seen = observation(work=work, cordoned={"n0": "batch", "n1": "batch"})
    assert nothing_cordoned_without_reason(seen) == [
        "n0: left drained by Lockstep at rest, work item done ''"
    ]
    # A flip-back that ended failed with its reason keeps its node drained on purpose.
    seen.rollbacks = {"n0": (0, "failed", "the BMC refused the re-flash")}
    assert nothing_cordoned_without_reason(seen) == []
    seen.rollbacks = {"n0": (0, "done", "")}
    assert nothing_cordoned_without_reason(seen) == [
        "n0: left drained by Lockstep at rest, work item done ''; done ''"
    ]
    seen.at_rest = False  # mid-flight, a cordon is the point
    assert nothing_cordoned_without_reason(seen) == []


def test_an_image_no_attested_bundle_names_is_caught() -> None:
    seen = observation(ledgers={"n0": [push(1.0, sha384="b" * 96)]})
    assert staged_from_attested(seen) == [
        "n0: accepted an image with SHA-384 bbbbbbbbbbbbbbbb... no attested bundle names"
    ]


def test_what_the_sampler_saw_is_reported_once() -> None:
    p = program()
    p.sampled.append("pool batch: 3 nodes out of service")
    assert violations(p, observation()) == ["pool batch: 3 nodes out of service"]
    assert violations(p, observation()) == []
