"""Which units go in which wave (issue 10, deliverable 5; seed 001, "ring rollout ... e.g. 5% ->
25% -> 100%").

Wave 0 is the canary. After it, wave k brings every stratum (profile x supplier x starting
stack) up to ``ceil(fraction_k x its size)`` moved nodes, counting the canary: waves grow by a
share of each stratum, so a profile whose racks are few and deep (GB200, 18 nodes a rack) grows
at the pace of one whose racks are many and shallow (HGX, 4), instead of waiting for the last
wave. A unit joins a wave only if one of its nodes belongs to a stratum still short of its share;
units are never split, so a stratum may overshoot by less than one unit, and a wave left empty
(a canary already past 5%) is dropped. A wave that moves a stratum moves at least the class's
canary minimum of it, and leaves none or at least that many: the healthgate judges each stratum
of a wave on that many nodes (issue 31). Within that, units are dealt round-robin over (site, rack)
so every early wave touches many racks lightly rather than a few heavily, and the units holding
control nodes go last, keeping the control groups untouched for as long as possible.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict

from lockstep_planner.domain.fleet import Stratum
from lockstep_planner.domain.units import Unit


def _dealt(units: list[Unit], seed_rank: dict[tuple[str, str], int]) -> list[Unit]:
    buckets: dict[tuple[str, str], list[Unit]] = defaultdict(list)
    for unit in sorted(units, key=lambda u: (u.rank, u.key)):
        first = unit.nodes[0]
        buckets[(first.site, first.rack)].append(unit)
    ordered = sorted(buckets, key=lambda b: (seed_rank[b], b))
    dealt: list[Unit] = []
    depth = 0
    while ordered:
        ordered = [b for b in ordered if depth < len(buckets[b])]
        dealt.extend(buckets[b][depth] for b in ordered)
        depth += 1
    return dealt


def _judgeable(moved: int, target: int, size: int, floor: int) -> int:
    """A stratum's cumulative target after a wave, raised so that the wave moves at least
    ``floor`` of its nodes when it moves any, and leaves none or at least ``floor`` behind: a
    wave holding 3 nodes of a stratum gives the gate 3 canary nodes, too few to judge (5 is the
    packaged minimum), and the rollout would stop there."""
    if not moved < target < size:
        return target
    raised = max(target, min(moved + floor, size))
    return size if size - raised < floor else raised


def assign_waves(
    canary: tuple[Unit, ...],
    rest: list[Unit],
    *,
    fractions: tuple[float, ...],
    controls: frozenset[str],
    bucket_rank: dict[tuple[str, str], int],
    min_per_stratum: int = 1,
) -> list[tuple[Unit, ...]]:
    """Waves as tuples of units, canary first; every unit in exactly one wave.

    Args:
        canary: the canary's units (wave 0).
        rest: every other unit that moves.
        fractions: cumulative shares of each stratum after each wave, rising, ending at 1.0.
        controls: control node ids; their units are dealt last.
        bucket_rank: a seeded rank per (site, rack), so the dealing order is reproducible.
        min_per_stratum: the fewest nodes of a stratum a wave that moves any of it moves (the
            class's canary minimum, which the gate needs to judge the stratum), unless fewer
            are left; a remainder smaller than this moves with the wave before it.
    """
    sizes: Counter[Stratum] = Counter(n.stratum for u in (*canary, *rest) for n in u.nodes)
    moved: Counter[Stratum] = Counter(n.stratum for u in canary for n in u.nodes)
    plain = [u for u in rest if not any(n.id in controls for n in u.nodes)]
    held = [u for u in rest if any(n.id in controls for n in u.nodes)]
    queue = _dealt(plain, bucket_rank) + _dealt(held, bucket_rank)
    waves: list[tuple[Unit, ...]] = [canary]
    for fraction in fractions:
        # Rounded first: 0.05 x 100 is 5.000000000000001 in binary floating point.
        target = {
            s: _judgeable(
                moved[s],
                n if fraction >= 1.0 else math.ceil(round(fraction * n, 6)),
                n,
                min_per_stratum,
            )
            for s, n in sizes.items()
        }
        wave: list[Unit] = []
        left: list[Unit] = []
        for unit in queue:
            if any(moved[n.stratum] < target[n.stratum] for n in unit.nodes):
                wave.append(unit)
                moved.update(n.stratum for n in unit.nodes)
            else:
                left.append(unit)
        queue = left
        if wave:
            waves.append(tuple(wave))
    if queue:  # only if fractions did not end at 1.0: never drop a node silently
        waves.append(tuple(queue))
    return waves
