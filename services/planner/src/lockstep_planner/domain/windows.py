"""A pool's maintenance windows as seconds after ``now`` (issue 10: "waves that take nodes out of
service start only inside a window").

An outage is placed only where it fits wholly inside one window: starting inside a window and
running past its end would take nodes out of service outside it, which is what the window
forbids. Overlapping or touching windows are merged first, so a long outage may span them.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta

from lockstep_common.maintenance import Schedule
from lockstep_planner.domain.fleet import Node, Window


class Windows:
    """Open intervals ``[start, end)`` in whole seconds after ``now``; ``None`` means always."""

    def __init__(self, windows: tuple[Window, ...] | None, *, now: datetime) -> None:
        self.always = windows is None
        spans = sorted(
            (
                # Rounded inwards: a plan never starts before a window opens or ends after.
                max(0, math.ceil((w.start - now).total_seconds())),
                math.floor((w.end - now).total_seconds()),
            )
            for w in windows or ()
        )
        merged: list[tuple[int, int]] = []
        for start, end in spans:
            if end <= start:
                continue  # over before now
            if merged and start <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], end))
            else:
                merged.append((start, end))
        self.spans = merged
        self._starts = [s for s, _ in merged]
        self._longest = 2**62 if self.always else max((e - s for s, e in merged), default=0)

    @classmethod
    def always_open(cls) -> Windows:
        """No restriction."""
        return cls(None, now=datetime.fromtimestamp(0, UTC))

    def _from(self, t: float) -> int:
        return max(0, bisect_right(self._starts, t) - 1)

    def fit(self, t: int, duration: int) -> int | None:
        """The earliest start ``>= t`` at which ``duration`` seconds fit inside one window, or
        None when no window left is long enough."""
        if self.always or duration == 0:
            return t
        for start, end in self.spans[self._from(t) :]:
            begin = max(start, t)
            if end - begin >= duration:
                return begin
        return None

    def longest(self) -> int:
        """The longest window left (seconds), or a very large number when always open."""
        return self._longest

    def open_until(self, start: float, need: float) -> float:
        """The earliest time by which ``need`` seconds of window have passed since ``start``
        (infinity when the windows run out first)."""
        if self.always or need <= 0:
            return start + max(need, 0.0)
        acc = 0.0
        for s, e in self.spans[self._from(start) :]:
            begin = max(float(s), start)
            if e <= begin:
                continue
            if acc + (e - begin) >= need:
                return begin + (need - acc)
            acc += e - begin
        return math.inf

    def first_fit_end(self, start: float, duration: float) -> float:
        """The earliest end of a ``duration``-second outage placed wholly inside one window."""
        if self.always or duration <= 0:
            return start + max(duration, 0.0)
        for s, e in self.spans[self._from(start) :]:
            begin = max(float(s), start)
            if e - begin >= duration:
                return begin + duration
        return math.inf


HORIZON = timedelta(days=366)
"""How far ahead declared weekly windows are laid out for a plan: a plan that needs more is
refused as one whose windows run out."""


def declared_windows(
    nodes: Iterable[Node],
    schedules: Mapping[tuple[str, str], Schedule],
    *,
    now: datetime,
) -> dict[str, tuple[Window, ...] | None]:
    """Each pool's windows from what operators declared (``lockstep pool set``): a node may be
    taken out of service only while both its pool's and its site's windows are open, so a pool
    gets the intersection of its own windows and those of every site its nodes are in (a pool
    spanning two sites with different windows is planned in the hours both are open). None:
    neither the pool nor any of its sites declares windows. An empty tuple: they never overlap,
    nothing of that pool can be taken out of service, and the plan says so."""
    sites: dict[str, set[str]] = defaultdict(set)
    for node in nodes:
        sites[node.pool].add(node.site)
    laid: dict[tuple[str, str], list[tuple[datetime, datetime]]] = {}
    out: dict[str, tuple[Window, ...] | None] = {}
    for pool, pool_sites in sorted(sites.items()):
        keys = [("pool", pool), *(("site", s) for s in sorted(pool_sites))]
        declared = [k for k in keys if k in schedules]
        if not declared:
            out[pool] = None
            continue
        spans: list[tuple[datetime, datetime]] | None = None
        for key in declared:
            if key not in laid:
                laid[key] = list(schedules[key].occurrences(now, now + HORIZON))
            spans = laid[key] if spans is None else _intersect(spans, laid[key])
        out[pool] = tuple(Window(a, b) for a, b in spans or ())
    return out


def _intersect(
    a: list[tuple[datetime, datetime]], b: list[tuple[datetime, datetime]]
) -> list[tuple[datetime, datetime]]:
    """The instants in both sorted, disjoint interval lists (a two-pointer sweep)."""
    out = []
    i = j = 0
    while i < len(a) and j < len(b):
        start, end = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if start < end:
            out.append((start, end))
        if a[i][1] <= b[j][1]:
            i += 1
        else:
            j += 1
    return out
