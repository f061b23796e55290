"""Reading a Slurm node from ``scontrol --oneliner show node`` as Slurm 22.05 really prints it
(tests/data/slurm, captured from a real cluster), and what its state means for a drain."""

from __future__ import annotations

from pathlib import Path

import pytest

from lockstep_updater.domain.drains import DrainState
from lockstep_updater.domain.slurm_node import (
    SlurmNode,
    UnreadableNode,
    lockstep_reason,
    parse_node,
)

pytestmark = pytest.mark.unit
DATA = Path(__file__).resolve().parents[2] / "data" / "slurm"


def captured(name: str) -> SlurmNode:
    return parse_node((DATA / f"{name}.txt").read_text())


@pytest.mark.parametrize(
    ("name", "state", "flags", "reason", "drain"),
    [
        ("idle", "IDLE", set(), None, DrainState.NOT_DRAINED),
        ("allocated", "ALLOCATED", set(), None, DrainState.NOT_DRAINED),
        (
            "allocated_drain_ours",
            "ALLOCATED",
            {"DRAIN"},
            "lockstep-updater: rollout r-7",
            DrainState.DRAINING,
        ),
        (
            "idle_drain_ours",
            "IDLE",
            {"DRAIN"},
            "lockstep-updater: lockstep rollout r-7",
            DrainState.DRAINED,
        ),
        ("idle_drain_foreign", "IDLE", {"DRAIN"}, "hw ticket 42", DrainState.NOT_DRAINED),
    ],
)
def test_captured_nodes_read_as_slurm_shows_them(
    name: str, state: str, flags: set[str], reason: str | None, drain: DrainState
) -> None:
    node = captured(name)
    assert (node.state, node.flags, node.reason, node.drain_state()) == (
        state,
        frozenset(flags),
        reason,
        drain,
    )
    assert node.name.startswith("gb-")
    assert node.reason_by == ("root" if reason else None)


def test_a_foreign_drain_is_out_of_service_but_not_lockstep_s() -> None:
    node = captured("idle_drain_foreign")
    assert node.drained and not node.ours
    assert captured("idle_drain_ours").ours


def line_with(state: str, reason: str | None) -> str:
    """A captured line with its state (and reason) replaced."""
    text = (DATA / "idle.txt").read_text().strip().replace("State=IDLE ", f"State={state} ")
    return text + (f" Reason={reason} [slurm@2026-11-24T21:04:36]" if reason else "")


@pytest.mark.parametrize(
    ("state", "drain"),
    [
        ("MIXED+DRAIN", DrainState.DRAINING),
        ("IDLE+DRAIN+COMPLETING", DrainState.DRAINING),
        ("IDLE+DRAIN+NOT_RESPONDING", DrainState.DRAINED),
        ("DOWN+DRAIN", DrainState.DRAINED),
        ("DOWN", DrainState.NOT_DRAINED),  # down, not drained: nothing to wait for or resume
        ("IDLE", DrainState.NOT_DRAINED),  # resumed by someone, the reason cleared
    ],
)
def test_jobs_still_on_a_drained_node_mean_draining(state: str, drain: DrainState) -> None:
    node = parse_node(line_with(state, lockstep_reason("rollout r-7")))
    assert node.drain_state() is drain


def test_a_reason_with_equals_signs_and_brackets_is_read_whole() -> None:
    node = parse_node(line_with("IDLE+DRAIN", "ops: see [ticket] a=b c=d"))
    assert (node.reason, node.reason_by) == ("ops: see [ticket] a=b c=d", "slurm")
    assert not node.ours


def test_lockstep_reasons_are_one_line_with_the_owner_first() -> None:
    assert lockstep_reason("rollout\n r-7\tnow") == "lockstep-updater: rollout r-7 now"


@pytest.mark.parametrize(
    "text",
    [
        "",
        (DATA / "not_found.txt").read_text(),
        (DATA / "idle.txt").read_text() * 2,  # two nodes: a name that matched more than one
        "NodeName=gb-a Arch=x86_64",  # no State=
    ],
)
def test_anything_but_one_node_line_is_unreadable(text: str) -> None:
    with pytest.raises(UnreadableNode):
        parse_node(text)
