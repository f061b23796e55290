"""The executor's maintenance-window check (issue 27, item 4): no node's work starts outside
the windows of its pool and of its site; work in flight finishes.

The planner already placed each wave's outages inside the windows, but plans are estimates
and waves run late, so the executor checks again at the two points where a node's work
begins: its preflight (nothing written yet) and its cordon (the outage begins). A node that
is already cordoned finishes its steps even when the window closes meanwhile: stopping it
half-way would keep it out of service longer, outside the window too. A rollback the gate asked
for is never held (the node runs an image that failed its gate). Pure: the schedules are read
by the caller in the check's transaction.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from lockstep_common.maintenance import parse_schedule


@dataclass(frozen=True, slots=True)
class Declared:
    """A pool's or a site's windows as the planner announced them."""

    scope: str
    name: str
    timezone: str
    windows: tuple[str, ...]


def closed(declared: Iterable[Declared], now: datetime) -> str | None:
    """Why work may not start now (the first schedule that is closed), or None when every
    schedule that applies is open (or none does)."""
    for d in sorted(declared, key=lambda d: (d.scope, d.name)):
        schedule = parse_schedule(d.windows, d.timezone)
        if schedule.open_at(now):
            continue
        opens = schedule.next_open(now)
        return (
            f"{d.scope} {d.name} is outside its maintenance windows "
            f"({'; '.join(d.windows)}, {d.timezone})"
            + (f"; the next opens {opens.isoformat()}" if opens else "")
        )
    return None
