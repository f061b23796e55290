"""State machines as data: a table of allowed transitions per ``StrEnum``, and the one check.

Every persisted state machine (attest's jobs, the updater's node steps, the planner's rollouts,
waves and fabric domains, the healthgate's gated waves) is a ``StrEnum`` plus a table saying
which state may follow which. The table is the rule; code asks it before every write, and an
exhaustive test walks every pair. A move the table does not allow is a bug, not bad luck: a
:class:`InvalidTransition` is permanent, never retried.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import Generic, TypeVar

from lockstep_common.errors import PermanentError

S = TypeVar("S", bound=enum.StrEnum)


class InvalidTransition(PermanentError):
    """A state change the machine's table does not allow."""

    def __init__(
        self,
        machine: str,
        current: enum.StrEnum,
        target: enum.StrEnum,
        allowed: Iterable[enum.StrEnum],
    ) -> None:
        listed = ", ".join(sorted(s.value for s in allowed)) or "nothing"
        super().__init__(
            f"{machine} cannot go from {current.value} to {target.value} (allowed from "
            f"{current.value}: {listed})",
            current=current.value,
            target=target.value,
        )
        self.current = current
        self.target = target


class Transitions(Generic[S]):
    """The allowed-transitions table of one machine, called to check a move.

    Args:
        machine: what changes state, as messages name it ("attest job", "node step").
        allowed: state -> the states that may follow it (none: terminal).
    """

    def __init__(self, machine: str, allowed: Mapping[S, frozenset[S]]) -> None:
        self.machine = machine
        self.allowed = allowed

    def __call__(self, current: S, target: S) -> S:
        """Return ``target`` if the table allows ``current -> target``.

        Raises:
            InvalidTransition: the move is not in the table.
        """
        if target not in self.allowed[current]:
            raise InvalidTransition(self.machine, current, target, self.allowed[current])
        return target

    @property
    def terminal(self) -> frozenset[S]:
        """The states nothing may follow."""
        return frozenset(s for s, nexts in self.allowed.items() if not nexts)
