"""Placing a stage's jobs in time under the out-of-service budgets and maintenance windows.

Each resource (a pool's ``max_unavailable``, a class's fabric-domain cap) is a set of slots; a
job takes as many slots of each resource as it has nodes there, at the earliest time all are
free and every pool it touches has a window the whole outage fits in. Jobs go longest first
(LPT, Graham 1969: within 4/3 of optimal on identical machines), ties by key, so the
schedule is deterministic. No slot ever holds two jobs at once, so no pool is ever over budget:
that is the invariant, the packing is only an estimate for ``--dry-run`` and the bench.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from lockstep_planner.domain.fleet import ComponentKind, PowerSide
from lockstep_planner.domain.refusal import PlanRefused
from lockstep_planner.domain.stages import FABRIC_SLOTS, Job, StageSpec
from lockstep_planner.domain.windows import Windows


@dataclass(frozen=True, slots=True)
class Batch:
    """Nodes out of service together over ``[start_s, end_s)`` (seconds after the plan's start)."""

    start_s: int
    end_s: int
    node_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Stage:
    """One gated layer of one wave, placed in time."""

    kind: ComponentKind
    power_side: PowerSide | None
    components: tuple[str, ...]
    node_ids: tuple[str, ...]
    start_s: int
    """Impactless staging starts here."""
    work_end_s: int
    """The last node is back in service."""
    soak_s: int
    """Soak before this stage's gate."""
    batches: tuple[Batch, ...]

    @property
    def end_s(self) -> int:
        """When the gate can judge the stage."""
        return self.work_end_s + self.soak_s


def place_stage(
    spec: StageSpec,
    start: int,
    *,
    caps: Mapping[str, int],
    windows: Mapping[str, Windows],
    soak_s: int,
) -> Stage:
    """Place ``spec``'s jobs from ``start`` on.

    Raises:
        PlanRefused: a pool's windows run out before a job fits.
    """
    t0 = start + spec.prestage_s
    wanted: dict[str, int] = defaultdict(int)
    for job in spec.jobs:
        for resource, count in job.demand:
            wanted[resource] += count
    # A resource never needs more slots than this stage can fill.
    free = {r: [t0] * min(caps[r], n) for r, n in wanted.items()}
    placed: dict[tuple[int, int], list[str]] = defaultdict(list)
    work_end = t0
    for job, t in _in_start_order(spec.jobs, t0, free, windows):
        end = t + job.duration
        placed[(t, end)].extend(job.node_ids)
        work_end = max(work_end, end)
    return Stage(
        spec.kind,
        spec.power_side,
        spec.components,
        spec.node_ids,
        start,
        work_end,
        soak_s,
        tuple(Batch(s, e, tuple(sorted(ids))) for (s, e), ids in sorted(placed.items())),
    )


def _in_start_order(
    jobs: tuple[Job, ...], t0: int, free: dict[str, list[int]], windows: Mapping[str, Windows]
) -> Iterator[tuple[Job, int]]:
    """Jobs with their start times, the one that can start first next; each job's slots in
    ``free`` are taken until its end before the next is chosen.

    Jobs with the same demand (the same pools, so the same windows) form a group taken longest
    first; among groups, the head that can start earliest goes next. Without that, a job
    waiting for its pool's night window would hold a shared slot (the fabric-domain cap) all
    day while jobs of always-open pools could use it. Only groups sharing a resource with the
    job just placed can change their start, so only those are looked at again.
    """
    groups: dict[tuple[tuple[str, int], ...], list[Job]] = defaultdict(list)
    for job in sorted(jobs, key=lambda j: (j.duration, j.key), reverse=True):
        groups[job.demand].append(job)
    demands = sorted(groups)
    users: dict[str, list[int]] = defaultdict(list)
    for g, demand in enumerate(demands):
        for resource, _ in demand:
            users[resource].append(g)
    heads = [len(groups[d]) - 1 for d in demands]  # each group pops from its end: longest
    for d in demands:
        groups[d].reverse()
    version = [0] * len(demands)
    queue: list[tuple[int, int, str, int, int]] = []

    def push(g: int) -> None:
        if heads[g] < 0:
            return
        job = groups[demands[g]][heads[g]]
        ready = t0
        for r, k in job.demand:
            slots = free[r]
            # The k-th earliest-free slot; sorting a budget's few slots beats nsmallest.
            ready = max(ready, slots[0] if k == 1 else sorted(slots)[k - 1])
        pools = [r for r, _ in job.demand if r != FABRIC_SLOTS]
        at = _fit(ready, job, pools, windows)
        version[g] += 1
        heapq.heappush(queue, (at, -job.duration, job.key, g, version[g]))

    for g in range(len(demands)):
        push(g)
    while queue:
        at, _, _, g, seen = heapq.heappop(queue)
        if seen != version[g]:
            continue
        job = groups[demands[g]][heads[g]]
        heads[g] -= 1
        for resource, count in job.demand:
            for _ in range(count):  # the k earliest-free slots, all free by ``at``
                heapq.heapreplace(free[resource], at + job.duration)
        yield job, at
        for other in sorted({o for r, _ in job.demand for o in users[r]}):
            push(other)


def _fit(t: int, job: Job, pools: list[str], windows: Mapping[str, Windows]) -> int:
    """The earliest ``>= t`` at which ``job``'s outage fits a window of every pool it touches.

    Raises:
        PlanRefused: a pool's windows run out first.
    """
    while True:
        moved = t
        for pool in pools:
            at = windows[pool].fit(moved, job.duration)
            if at is None:
                raise PlanRefused(
                    [
                        f"pool {pool}: its maintenance windows run out before {job.label} can be "
                        f"taken out of service for {job.duration} s; add windows"
                    ]
                )
            moved = at
        if moved == t:
            return t
        t = moved
