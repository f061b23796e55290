"""Attest job states: the transition table, its guard, and the two places that restate it
(the diagram in docs/bundles.md and the CHECK constraint of migrations/0001_attest.sql)."""

from __future__ import annotations

import itertools
import re
from importlib import resources
from pathlib import Path

import pytest

from lockstep_attest.domain.jobs import ALLOWED, INITIAL, JobState, transition
from lockstep_common.errors import PermanentError
from lockstep_common.transitions import InvalidTransition

pytestmark = pytest.mark.unit
REPO = Path(__file__).resolve().parents[3]
_EDGE = re.compile(r"^\s*(\[\*\]|\w+)\s*-->\s*(\[\*\]|\w+)\s*(?::.*)?$")


def test_table_covers_every_state() -> None:
    assert set(ALLOWED) == set(JobState)


@pytest.mark.parametrize(("current", "target"), list(itertools.product(JobState, JobState)))
def test_every_pair_is_allowed_or_raises(current: JobState, target: JobState) -> None:
    if target in ALLOWED[current]:
        assert transition(current, target) is target
    else:
        with pytest.raises(InvalidTransition, match=f"from {current.value} to {target.value}"):
            transition(current, target)


def test_an_invalid_transition_is_permanent_and_says_what_is_allowed() -> None:
    with pytest.raises(PermanentError, match=r"allowed from running: done, running\)") as err:
        transition(JobState.RUNNING, JobState.PENDING)
    assert err.value.context == {"current": "running", "target": "pending"}
    with pytest.raises(InvalidTransition, match=r"allowed from done: nothing\)"):
        transition(JobState.DONE, JobState.DONE)


def test_done_is_the_only_final_state_and_every_state_is_reachable() -> None:
    assert [s for s, nexts in ALLOWED.items() if not nexts] == [JobState.DONE]
    reached, frontier = {INITIAL}, [INITIAL]
    while frontier:
        for nxt in ALLOWED[frontier.pop()] - reached:
            reached.add(nxt)
            frontier.append(nxt)
    assert reached == set(JobState)


def diagram_in(markdown: str) -> list[tuple[str, str]]:
    """The edges of the one Mermaid state diagram in ``markdown``."""
    blocks = re.findall(r"```mermaid\n(stateDiagram-v2\n.*?)```", markdown, flags=re.S)
    assert len(blocks) == 1, "expected one stateDiagram-v2 block"
    lines = blocks[0].splitlines()[1:]
    edges = [m.groups() for m in map(_EDGE.match, lines) if m]
    assert len(edges) == len([ln for ln in lines if ln.strip()]), "a line is not an edge"
    return [(a, b) for a, b in edges]


def test_the_diagram_in_the_docs_is_the_table() -> None:
    edges = diagram_in((REPO / "docs" / "bundles.md").read_text(encoding="utf-8"))
    assert [b for a, b in edges if a == "[*]"] == [INITIAL.value]
    finals = {a for a, b in edges if b == "[*]"}
    assert finals == {s.value for s, nexts in ALLOWED.items() if not nexts}
    drawn = {(a, b) for a, b in edges if "[*]" not in (a, b)}
    assert len(drawn) == len(edges) - 1 - len(finals), "an edge is drawn twice"
    assert drawn == {(s.value, t.value) for s, nexts in ALLOWED.items() for t in nexts}


def test_the_diagram_parser_reads_edges_with_and_without_labels() -> None:
    text = "```mermaid\nstateDiagram-v2\n    [*] --> pending\n    pending --> running: x\n```\n"
    assert diagram_in(text) == [("[*]", "pending"), ("pending", "running")]


def test_the_database_accepts_exactly_the_enum_values() -> None:
    sql = resources.files("lockstep_attest.migrations").joinpath("0001_attest.sql").read_text()
    column = re.search(r"^\s*state\s+text\s+NOT NULL DEFAULT '(\w+)' CHECK \(state IN \((.*?)\)\)",
                       sql, flags=re.M)  # fmt: skip
    assert column is not None
    assert column[1] == INITIAL.value
    assert set(re.findall(r"'(\w+)'", column[2])) == {s.value for s in JobState}
