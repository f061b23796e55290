"""A rollout's lifecycle and each wave's, as transition tables (style.md section 7, rule 7).

Gate semantics follow Argo Rollouts' three-valued analysis (peers.md section 8: "Successful ->
continue, Failed -> abort, Inconclusive -> pause for a human") and issue 10, deliverable 7:
``gate.passed`` plus the soak releases the next wave, ``gate.tripped`` halts at once,
``gate.inconclusive`` pauses, a wave without progress by its deadline halts. Every state that
can stop has an exit to ``aborted`` (peers.md (c) 6 and 8: rollouts stuck in a state nobody
can leave).
"""

from __future__ import annotations

import enum

from lockstep_common.transitions import Transitions


class RolloutState(enum.StrEnum):
    """Where a rollout is."""

    PLANNED = "planned"
    """Planned (and possibly waiting for approvals); nothing released."""
    RUNNING = "running"
    """Waves are being released as gates pass."""
    PAUSED = "paused"
    """An operator paused it or a gate was inconclusive: no new wave until resumed."""
    HALTED = "halted"
    """A gate tripped or a wave missed its deadline: stopped with the evidence; a human decides."""
    ABORTED = "aborted"
    """Stopped for good: new work stops, in-flight device steps finish."""
    COMPLETED = "completed"
    """Every wave passed its gate."""


ROLLOUT_ALLOWED: dict[RolloutState, frozenset[RolloutState]] = {
    RolloutState.PLANNED: frozenset({RolloutState.RUNNING, RolloutState.ABORTED}),
    RolloutState.RUNNING: frozenset(
        {RolloutState.PAUSED, RolloutState.HALTED, RolloutState.ABORTED, RolloutState.COMPLETED}
    ),
    # A trip can still arrive while paused (in-flight steps finish and are judged).
    RolloutState.PAUSED: frozenset(
        {RolloutState.RUNNING, RolloutState.HALTED, RolloutState.ABORTED}
    ),
    # A halted rollout is not resumed: the evidence says the plan is wrong; a new intent (and
    # plan hash, and approval) is the way forward, so the only exit is closing it.
    RolloutState.HALTED: frozenset({RolloutState.ABORTED}),
    RolloutState.ABORTED: frozenset(),
    RolloutState.COMPLETED: frozenset(),
}


class WaveState(enum.StrEnum):
    """Where one wave is."""

    PENDING = "pending"
    """Not released: the updater may not touch its nodes (design.md, non-negotiable 5)."""
    RELEASED = "released"
    """``wave.planned`` sent; the updater is working through it."""
    SOAKING = "soaking"
    """The updater finished; the soak runs before the gate judges."""
    HELD = "held"
    """The gate was inconclusive: waiting for a human (or another soak)."""
    PASSED = "passed"
    TRIPPED = "tripped"
    TIMED_OUT = "timed_out"
    """No progress within the wave's deadline."""
    CANCELLED = "cancelled"
    """The rollout stopped before this wave finished."""


WAVE_ALLOWED: dict[WaveState, frozenset[WaveState]] = {
    WaveState.PENDING: frozenset({WaveState.RELEASED, WaveState.CANCELLED}),
    # Hard failures (a bricked device, a DCGM fail) trip at once, without waiting for the soak.
    WaveState.RELEASED: frozenset(
        {WaveState.SOAKING, WaveState.TRIPPED, WaveState.TIMED_OUT, WaveState.CANCELLED}
    ),
    WaveState.SOAKING: frozenset(
        {WaveState.PASSED, WaveState.TRIPPED, WaveState.HELD, WaveState.CANCELLED}
    ),
    # Missing data is never a pass: a held wave is passed by a human, soaked again, or tripped.
    WaveState.HELD: frozenset(
        {WaveState.PASSED, WaveState.SOAKING, WaveState.TRIPPED, WaveState.CANCELLED}
    ),
    WaveState.PASSED: frozenset(),
    WaveState.TRIPPED: frozenset(),
    WaveState.TIMED_OUT: frozenset(),
    WaveState.CANCELLED: frozenset(),
}

ROLLOUT_LABELS: dict[tuple[str, str], str] = {
    ("planned", "running"): "approved, first wave released",
    ("running", "paused"): "lockstep rollout pause, or a gate inconclusive",
    ("running", "halted"): "a gate tripped, or a wave missed its deadline",
    ("running", "completed"): "the last wave passed",
    ("paused", "running"): "lockstep rollout resume",
    ("halted", "aborted"): "closed by an operator",
}
WAVE_LABELS: dict[tuple[str, str], str] = {
    ("pending", "released"): "wave.planned sent",
    ("released", "soaking"): "wave.completed",
    ("released", "tripped"): "a hard rule tripped",
    ("released", "timed_out"): "no progress by the deadline",
    ("soaking", "passed"): "gate.passed, soak over",
    ("soaking", "tripped"): "gate.tripped",
    ("soaking", "held"): "gate.inconclusive",
    ("held", "passed"): "accepted by lockstep rollout resume",
}
"""Why each move happens, on the arrows of the diagrams ``lockstep docs generate`` draws."""

transition = Transitions("rollout", ROLLOUT_ALLOWED)
"""``transition(current, target)``: ``target`` if ``ROLLOUT_ALLOWED`` allows the move, else
:class:`InvalidTransition`."""

wave_transition = Transitions("wave", WAVE_ALLOWED)
"""``wave_transition(current, target)``: the same for ``WAVE_ALLOWED``."""
