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

from lockstep_common.errors import PermanentError


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


class InvalidTransition(PermanentError):
    """A job state change the table does not allow: a bug, never retried."""

    def __init__(self, current: JobState, target: JobState) -> None:
        allowed = ", ".join(sorted(s.value for s in ALLOWED[current])) or "nothing"
        super().__init__(
            f"attest job cannot go from {current.value} to {target.value} (allowed from "
            f"{current.value}: {allowed})",
            current=current.value,
            target=target.value,
        )
        self.current = current
        self.target = target


def transition(current: JobState, target: JobState) -> JobState:
    """Return ``target`` if the table allows ``current -> target``.

    Raises:
        InvalidTransition: the move is not in ``ALLOWED``.
    """
    if target not in ALLOWED[current]:
        raise InvalidTransition(current, target)
    return target
