"""The updater's per-node step machine: the transition table, its guard, and the two places
that restate it (the diagram in docs/updater.md and the CHECK constraint of
migrations/0001_updater.sql)."""

from __future__ import annotations

import itertools
import re
from importlib import resources
from pathlib import Path

import pytest

from lockstep_common.errors import PermanentError
from lockstep_common.transitions import InvalidTransition
from lockstep_updater.domain.steps import (
    ALLOWED,
    INITIAL,
    OUT_OF_SERVICE,
    TERMINAL,
    NodeStep,
    transition,
)
from tests.unit.attest.test_job_states import diagram_in

pytestmark = pytest.mark.unit
REPO = Path(__file__).resolve().parents[3]


def test_table_covers_every_state() -> None:
    assert set(ALLOWED) == set(NodeStep)


@pytest.mark.parametrize(("current", "target"), list(itertools.product(NodeStep, NodeStep)))
def test_every_pair_is_allowed_or_raises(current: NodeStep, target: NodeStep) -> None:
    if target in ALLOWED[current]:
        assert transition(current, target) is target
    else:
        with pytest.raises(InvalidTransition, match=f"from {current.value} to {target.value}"):
            transition(current, target)


def test_an_invalid_transition_is_permanent_and_says_what_is_allowed() -> None:
    with pytest.raises(PermanentError, match=r"allowed from done: nothing\)") as err:
        transition(NodeStep.DONE, NodeStep.STAGING)
    assert err.value.context == {"current": "done", "target": "staging"}


def test_the_ends_are_final_and_every_state_is_reachable() -> None:
    assert {
        NodeStep.DONE,
        NodeStep.CANCELLED,
        NodeStep.FAILED,
        NodeStep.QUARANTINED,
    } == TERMINAL
    reached, frontier = {INITIAL}, [INITIAL]
    while frontier:
        for nxt in ALLOWED[frontier.pop()] - reached:
            reached.add(nxt)
            frontier.append(nxt)
    assert reached == set(NodeStep)


def test_nothing_returns_to_pending_and_a_node_is_never_activated_before_it_is_drained() -> None:
    assert all(NodeStep.PENDING not in nexts for nexts in ALLOWED.values())
    into_activating = {s for s, nexts in ALLOWED.items() if NodeStep.ACTIVATING in nexts}
    assert into_activating == {NodeStep.DRAINING, NodeStep.ACTIVATING}


def test_once_cordoned_a_node_ends_only_through_uncordoning_or_quarantine() -> None:
    # A node that may have been cordoned is never left cordoned without a reason.
    for state in OUT_OF_SERVICE - {NodeStep.UNCORDONING}:
        ends = ALLOWED[state] & TERMINAL
        assert ends <= {NodeStep.QUARANTINED}, state


def test_the_diagram_in_the_docs_is_the_table() -> None:
    edges = diagram_in((REPO / "docs" / "updater.md").read_text(encoding="utf-8"))
    assert [b for a, b in edges if a == "[*]"] == [INITIAL.value]
    finals = {a for a, b in edges if b == "[*]"}
    assert finals == {s.value for s in TERMINAL}
    drawn = {(a, b) for a, b in edges if "[*]" not in (a, b)}
    assert len(drawn) == len(edges) - 1 - len(finals), "an edge is drawn twice"
    assert drawn == {(s.value, t.value) for s, nexts in ALLOWED.items() for t in nexts}


def test_the_database_accepts_exactly_the_enum_values() -> None:
    migrations = resources.files("lockstep_updater.migrations")
    sql = migrations.joinpath("0001_updater.sql").read_text()
    column = re.search(r"^\s*state\s+text\s+NOT NULL DEFAULT '(\w+)' CHECK \(state IN \((.*?)\)\)",
                       sql, flags=re.M)  # fmt: skip
    assert column is not None
    assert column[1] == INITIAL.value
    # The last migration that restates the CHECK (0004: in_band) is the one in force.
    checks = [
        found
        for name in sorted(f.name for f in migrations.iterdir() if f.name.endswith(".sql"))
        for found in re.findall(
            r"CHECK \(state IN \((.*?)\)\)", migrations.joinpath(name).read_text()
        )
    ]
    assert set(re.findall(r"'(\w+)'", checks[-1])) == {s.value for s in NodeStep}
