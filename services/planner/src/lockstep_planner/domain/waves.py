"""Which units go in which wave (issue 10, deliverable 5; seed 001, "ring rollout ... e.g. 5% ->
25% -> 100%").

Wave 0 is the canary. After it, wave k brings the number of moved nodes up to
``ceil(fraction_k x scope)``, counting the canary; units are never split, so a wave may
overshoot by less than one unit, and a wave left empty (a canary already past 5%) is dropped.
Units are dealt round-robin over (site, rack) so every early wave touches many racks lightly
rather than a few heavily, and the units holding control nodes go last, keeping the control
groups untouched for as long as possible.
"""

from __future__ import annotations

import math
from collections import defaultdict

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


def assign_waves(
    canary: tuple[Unit, ...],
    rest: list[Unit],
    *,
    fractions: tuple[float, ...],
    controls: frozenset[str],
    bucket_rank: dict[tuple[str, str], int],
) -> list[tuple[Unit, ...]]:
    """Waves as tuples of units, canary first; every unit in exactly one wave.

    Args:
        canary: the canary's units (wave 0).
        rest: every other unit that moves.
        fractions: cumulative shares of the scope after each wave, rising, ending at 1.0.
        controls: control node ids; their units are dealt last.
        bucket_rank: a seeded rank per (site, rack), so the dealing order is reproducible.
    """
    total = sum(u.size for u in canary) + sum(u.size for u in rest)
    plain = [u for u in rest if not any(n.id in controls for n in u.nodes)]
    held = [u for u in rest if any(n.id in controls for n in u.nodes)]
    queue = _dealt(plain, bucket_rank) + _dealt(held, bucket_rank)
    waves: list[tuple[Unit, ...]] = [canary]
    moved = sum(u.size for u in canary)
    at = 0
    for fraction in fractions:
        # Rounded first: 0.05 x 100 is 5.000000000000001 in binary floating point.
        target = total if fraction >= 1.0 else math.ceil(round(fraction * total, 6))
        wave: list[Unit] = []
        while at < len(queue) and moved < target:
            wave.append(queue[at])
            moved += queue[at].size
            at += 1
        if wave:
            waves.append(tuple(wave))
    if at < len(queue):  # only if fractions did not end at 1.0: never drop a node silently
        waves.append(tuple(queue[at:]))
    return waves
