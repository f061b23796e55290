"""The planner's refusal: every reason an intent cannot be planned, in one error."""

from __future__ import annotations

from collections.abc import Iterable

from lockstep_common.errors import PermanentError

SHOWN = 10
"""Names listed per reason before "and N more": a refusal stays readable for 12,500 nodes."""


class PlanRefused(PermanentError):
    """The intent cannot be planned as asked; ``reasons`` names each problem (issue 10: "a
    refusal that names every reason"). Replanning the same input refuses the same way."""

    def __init__(self, reasons: Iterable[str]) -> None:
        self.reasons = tuple(reasons)
        super().__init__("; ".join(self.reasons), reasons=list(self.reasons))


def some(names: Iterable[str]) -> str:
    """``a, b, c`` or ``a, b, ... and 7 more``, sorted."""
    listed = sorted(names)
    head = ", ".join(listed[:SHOWN])
    return head if len(listed) <= SHOWN else f"{head} and {len(listed) - SHOWN} more"
