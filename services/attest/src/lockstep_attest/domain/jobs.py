"""An attestation job's states and the moves between them, as data (style.md section 7, rule 7).

A ``bundle.submitted`` event becomes a ``pending`` job; a worker claims it (``running``, under a
lease whose token is bumped on every claim) and commits its verdict (``done``). A job whose
holder died keeps ``running`` until its lease lapses; the next claim takes it over, which is a
``running -> running`` move with a new token. Nothing returns a job to ``pending``: a job that
runs out of attempts still ends ``done``, with a failed verdict, so that every submission gets
an answer. The table is drawn in docs/bundles.md ("The service"); a unit test keeps the two
equal. The strings are the values of ``attest.jobs.state`` (migrations/0001_attest.sql).
"""

from __future__ import annotations

import enum

from lockstep_common.transitions import Transitions


class JobState(enum.StrEnum):
    """Where an attestation job is."""

    PENDING = "pending"
    """Recorded from a submission; no worker has claimed it yet."""
    RUNNING = "running"
    """Claimed by a worker whose lease (``lease_token``, ``lease_until``) says who holds it."""
    DONE = "done"
    """Its verdict is committed; nothing changes a finished job."""


INITIAL = JobState.PENDING
"""The state a submission's job is recorded in."""

ALLOWED: dict[JobState, frozenset[JobState]] = {
    JobState.PENDING: frozenset({JobState.RUNNING}),
    # running -> running: the holder's lease lapsed (it crashed or stalled) and another claim
    # takes the job over with a new fencing token; the old holder's commit is then refused.
    JobState.RUNNING: frozenset({JobState.RUNNING, JobState.DONE}),
    # A verdict is the audit record: a finished job is never claimed or finished again.
    JobState.DONE: frozenset(),
}

ENTRY = "bundle.submitted"
"""What creates a job (the arrow into ``pending`` in docs/bundles.md's diagram)."""

LABELS: dict[tuple[str, str], str] = {
    ("pending", "running"): "claimed (token + 1)",
    ("running", "running"): "lease lapsed, re-claimed (token + 1)",
    ("running", "done"): "verdict committed by the token's holder",
}
"""Why each move happens, on the arrows of the diagram ``lockstep docs generate`` draws."""


transition = Transitions("attest job", ALLOWED)
"""``transition(current, target)``: ``target`` if the table allows the move, else
:class:`InvalidTransition`."""
