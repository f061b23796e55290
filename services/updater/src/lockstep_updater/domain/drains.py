"""Who a scheduler drain belongs to and how far it has come: the vocabulary every scheduler
adapter (``ports.Scheduler``) answers in."""

from __future__ import annotations

import enum

OWNER = "lockstep-updater"
"""Who Lockstep's drains are by: a drain by anyone else is foreign and is never undone."""


class DrainState(enum.StrEnum):
    """How far a drain the scheduler was asked for has come."""

    DRAINING = "draining"
    DRAINED = "drained"
    NOT_DRAINED = "not_drained"
    """No drain at all (someone resumed it), or a drain that is not Lockstep's."""
