"""A gated wave: who is canary and who is control, its states, and the windows it is judged over.

A ``wave.planned`` event names the wave's nodes per stratum with each stratum's control group
(``WaveStratum``); the wave is ``updating`` until ``wave.completed``, then ``soaking`` for
``soak_seconds``. Its gate is decided once (``decided``): at once by a hard rule, or by the judge
when the soak has elapsed. A rollout that halts or completes first leaves it ``closed``,
undecided. The strings are the values of ``healthgate.waves.state`` (migrations).

The judge's window is the soak, ``[completed_at, due_at]``, evaluated as of ``due_at`` so the
verdict is a function of the stored samples and can be re-derived; the environmental check's
baseline is the ``baseline_s`` before the wave was planned.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np

from lockstep_common.events.v1 import WavePlanned
from lockstep_common.transitions import Transitions
from lockstep_gate.samples import DEFAULT_STRATUM, SampleTable
from lockstep_healthgate.domain.readings import Columns


class WaveState(enum.StrEnum):
    """Where a wave's gate is."""

    UPDATING = "updating"
    """Planned: the updater is at work; hard rules already apply to its nodes."""
    SOAKING = "soaking"
    """Completed: the soak runs; the judge decides when it has elapsed."""
    DECIDED = "decided"
    """A verdict is persisted and emitted; nothing changes it."""
    CLOSED = "closed"
    """The rollout halted or completed before a verdict: nothing left to gate."""


ALLOWED: dict[WaveState, frozenset[WaveState]] = {
    # A hard rule can trip while the updater is still at work.
    WaveState.UPDATING: frozenset({WaveState.SOAKING, WaveState.DECIDED, WaveState.CLOSED}),
    WaveState.SOAKING: frozenset({WaveState.DECIDED, WaveState.CLOSED}),
    # A verdict is the record: it is neither reopened nor replaced.
    WaveState.DECIDED: frozenset(),
    WaveState.CLOSED: frozenset(),
}
OPEN = frozenset({WaveState.UPDATING, WaveState.SOAKING})
INITIAL = WaveState.UPDATING
ENTRY = "wave.planned"
"""What opens a gated wave (the arrow into ``updating`` in docs/healthgate.md's diagram)."""

LABELS: dict[tuple[str, str], str] = {
    ("updating", "soaking"): "wave.completed",
    ("updating", "decided"): "a hard rule tripped",
    ("updating", "closed"): "rollout halted or completed",
    ("soaking", "decided"): "soak judged, or a hard rule or silence tripped",
    ("soaking", "closed"): "rollout halted or completed",
}
"""Why each move happens, on the arrows of the diagram ``lockstep docs generate`` draws."""


transition = Transitions("gated wave", ALLOWED)
"""``transition(current, target)``: ``target`` if the table allows the move, else
:class:`InvalidTransition`."""


@dataclass(frozen=True, slots=True)
class Member:
    """One node of a gated wave: canary (updated by it) or control, in one stratum."""

    node_id: str
    stratum: str
    canary: bool


@dataclass(frozen=True, slots=True)
class Wave:
    """A gated wave as stored."""

    rollout_id: str
    wave: int
    state: WaveState
    planned_at: datetime
    soak_seconds: int
    members: tuple[Member, ...]
    completed_at: datetime | None = None

    @property
    def canary(self) -> tuple[str, ...]:
        """The nodes the wave updates."""
        return tuple(m.node_id for m in self.members if m.canary)

    @property
    def canary_strata(self) -> dict[str, str]:
        """Canary node -> its stratum (the hard rules' roster)."""
        return {m.node_id: m.stratum for m in self.members if m.canary}

    @property
    def due_at(self) -> datetime | None:
        """When the soak has elapsed (None before the wave completed)."""
        if self.completed_at is None:
            return None
        return self.completed_at + timedelta(seconds=self.soak_seconds)


def members_of(planned: WavePlanned) -> tuple[Member, ...]:
    """Canary and control per stratum; a wave node outside every stratum is a canary of the
    default stratum (a planner that sends no strata: no control, so never a pass). A node named
    twice keeps its first role, canary before control."""
    seen: dict[str, Member] = {}
    for s in planned.strata:
        for n in s.node_ids:
            seen.setdefault(n, Member(n, s.key, True))
    for n in planned.node_ids:
        seen.setdefault(n, Member(n, DEFAULT_STRATUM, True))
    for s in planned.strata:
        for n in s.control_ids:
            seen.setdefault(n, Member(n, s.key, False))
    return tuple(sorted(seen.values(), key=lambda m: m.node_id))


@dataclass(frozen=True, slots=True)
class Window:
    """The samples the judge reads: soak ``[start, end]`` and baseline ``[baseline_start, start)``
    where the baseline ends when the wave was planned."""

    baseline_start: datetime
    baseline_end: datetime
    start: datetime
    end: datetime


def judged_window(wave: Wave, baseline_s: float) -> Window:
    """The window of a completed wave."""
    if wave.completed_at is None or wave.due_at is None:
        raise ValueError(f"wave {wave.rollout_id}/{wave.wave} has not completed")
    return Window(
        baseline_start=wave.planned_at - timedelta(seconds=baseline_s),
        baseline_end=wave.planned_at,
        start=wave.completed_at,
        end=wave.due_at,
    )


def sample_table(
    members: Sequence[Member],
    cols: Columns,
    *,
    soak_start: float,
    baseline_end: float | None = None,
) -> SampleTable:
    """The judge's table from stored rows of the members: rows before ``baseline_end`` are
    baseline, rows from ``soak_start`` on are soak, anything between (the update itself, when
    nodes are in flux) is left out. Rows of nodes that are not members are left out. Its nodes
    and metrics are every member and metric named in ``cols``, rows or not. Works on the codes
    of ``cols``: no Python object per row (see ``domain.readings``)."""
    roles = {m.node_id: m for m in members}
    nodes = sorted(n for n in cols.nodes if n in roles)
    code = {n: i for i, n in enumerate(nodes)}
    metrics = sorted(cols.metrics)
    metric_code = {m: i for i, m in enumerate(metrics)}
    # read code -> table code (-1: not a member)
    node_map = np.array([code.get(n, -1) for n in cols.nodes] or [-1], dtype=np.int64)
    metric_map = np.array([metric_code.get(m, -1) for m in cols.metrics] or [-1], dtype=np.int64)
    t = cols.time
    table_node = node_map[cols.node_code]
    baseline = t < baseline_end if baseline_end is not None else np.zeros(len(t), dtype=np.bool_)
    keep = (table_node >= 0) & ((t >= soak_start) | baseline)
    idx = np.flatnonzero(keep)
    return SampleTable.from_columns(
        nodes=nodes,
        canary=[roles[n].canary for n in nodes],
        node_strata=[roles[n].stratum for n in nodes],
        metrics=metrics,
        node=table_node[idx],
        metric=metric_map[cols.metric_code[idx]],
        value=cols.value[idx],
        time=t[idx],
        baseline=baseline[idx],
    )
