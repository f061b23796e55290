"""Scheduler refusals; each carries the HTTP status the API answers with."""

from __future__ import annotations


class SchedulerError(Exception):
    """Base of scheduler refusals; ``status`` is the HTTP status the API answers with."""

    status = 400


class UnknownNode(SchedulerError):
    """No such node."""

    status = 404


class UnknownPool(SchedulerError):
    """No such pool."""

    status = 404


class Conflict(SchedulerError):
    """The request contradicts the node's current state."""

    status = 409


class DrainedByOther(Conflict):
    """The node is drained by another actor: resuming (or re-draining) it is not ours to do."""


class TooManyRequests(SchedulerError):
    """The drain is refused for now, as Kubernetes answers an eviction a PodDisruptionBudget
    blocks (API-initiated eviction: 429); nothing changed, the caller may retry later."""

    status = 429


class InvalidTransition(Exception):
    """A node state change the table does not allow (a bug in the model, not a refusal)."""
