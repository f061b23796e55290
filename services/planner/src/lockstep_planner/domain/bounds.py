"""A lower bound on any plan's makespan, from budgets, windows and durations alone.

Any valid plan runs the same waves and stages one after another with the same soaks (gates
serialise them), so a bound per stage, chained, bounds the whole. Per resource with ``c`` slots
and outage durations ``d1 >= d2 >= ...`` (one per node, or per domain for the fabric cap), the
stage's work needs at least ``L`` seconds of open window after its start, where ``L`` is the
largest of

- ``sum(d) / c``: the area bound;
- ``(k + 1) x d[k*c + 1]`` for every ``k``: of the ``k*c + 1`` longest outages some slot runs
  ``k + 1`` one after another (pigeonhole), each at least that long; with equal durations
  this is ``ceil(n / c) x d``, exact;

and the longest outage must also fit inside a single window. Starting earlier never makes a
bound later, so chaining bounds from the bound of the stage before keeps it a bound.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping

from lockstep_planner.domain.stages import FABRIC_SLOTS, StageSpec
from lockstep_planner.domain.windows import Windows

ALWAYS = Windows.always_open()


def stage_bound(
    spec: StageSpec, start: float, *, caps: Mapping[str, int], windows: Mapping[str, Windows]
) -> float:
    """The earliest the last outage of ``spec`` can end if the stage starts at ``start``."""
    begin = start + spec.prestage_s
    # (resource, windows the work must fall in) -> outage durations, one per slot taken.
    work: dict[tuple[str, tuple[tuple[int, int], ...] | None], list[int]] = defaultdict(list)
    open_: dict[tuple[tuple[int, int], ...] | None, Windows] = {None: ALWAYS}
    used = {r for job in spec.jobs for r, _ in job.demand if r != FABRIC_SLOTS}
    kinds = {r: _key(windows[r], open_) for r in sorted(used)}
    for job in spec.jobs:
        for resource, count in job.demand:
            if resource != FABRIC_SLOTS:
                work[(resource, kinds[resource])].extend([job.duration] * count)
                continue
            # The fabric cap has no windows of its own, but a domain's outage must also fall
            # in the windows of every pool it touches: bound the cap once per kind of window.
            work[(resource, None)].append(job.duration)
            for kind in {kinds[r] for r, _ in job.demand if r != FABRIC_SLOTS}:
                if kind is not None:
                    work[(resource, kind)].append(job.duration)
    end = begin
    for (resource, kind), durations in work.items():
        end = max(end, _needed(durations, caps[resource], open_[kind], begin))
    return end


def _key(
    windows: Windows, seen: dict[tuple[tuple[int, int], ...] | None, Windows]
) -> tuple[tuple[int, int], ...] | None:
    key = None if windows.always else tuple(windows.spans)
    seen.setdefault(key, windows)
    return key


def _needed(durations: list[int], slots: int, windows: Windows, begin: float) -> float:
    durations.sort(reverse=True)
    need = sum(durations) / slots
    for k in range(math.ceil(len(durations) / slots)):
        need = max(need, (k + 1) * durations[k * slots])
    return max(windows.open_until(begin, need), windows.first_fit_end(begin, durations[0]))
