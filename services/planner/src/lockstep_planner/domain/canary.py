"""Canary and control-group selection (issue 10, deliverable 4).

The canary holds, for every stratum (profile x supplier x current stack), at least the change
class's minimum of nodes, or all of a smaller stratum: seed 000 asks for a canary "spanning every
hardware revision and supplier in the fleet, because firmware bugs are often SKU-specific", and
design.md's stratum adds the starting stack, since a move from another tuple is another change.
Within a stratum it prefers healthy, conformant, idle nodes (a sick canary proves nothing; an
idle one drains for free) and then spreads over sites and racks, so one rack's power or cooling
does not decide the verdict. For each stratum it also picks a concurrent control group: as many
untouched nodes of the same stratum, for the healthgate to compare like with like over the same
window (Kayenta's canary-vs-baseline; peers.md section 10).

Ties are broken by :func:`seeded.rank`, so the same seed picks the same nodes in every process.
"""

from __future__ import annotations

import heapq
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from lockstep_planner.domain.fleet import Node, Stratum
from lockstep_planner.domain.seeded import rank
from lockstep_planner.domain.units import Unit


@dataclass(frozen=True, slots=True)
class StratumCover:
    """How one stratum is covered: its size, canary nodes and control nodes."""

    stratum: Stratum
    size: int
    canary: tuple[str, ...]
    controls: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CanaryChoice:
    """The canary's units and, per stratum, what covers it."""

    units: tuple[Unit, ...]
    strata: tuple[StratumCover, ...]

    @property
    def control_ids(self) -> frozenset[str]:
        return frozenset(n for s in self.strata for n in s.controls)


def _unfitness(node: Node) -> tuple[bool, bool, bool]:
    """Sorts healthy before sick, conformant before drifted, idle before busy."""
    return (not node.healthy, node.drifted, not node.idle)


class _Spread:
    """How often each site and rack has been used so far."""

    def __init__(self) -> None:
        self.sites: Counter[str] = Counter()
        self.racks: Counter[tuple[str, str]] = Counter()

    def cost(self, node: Node) -> tuple[int, int]:
        return (self.sites[node.site], self.racks[(node.site, node.rack)])

    def add(self, nodes: tuple[Node, ...]) -> None:
        for node in nodes:
            self.sites[node.site] += 1
            self.racks[(node.site, node.rack)] += 1


T = TypeVar("T")
K = TypeVar("K", bound=tuple[object, ...])


def _cheapest(items: list[T], key: Callable[[T], K], usable: Callable[[T], bool]) -> Iterator[T]:
    """``items`` cheapest first by ``key``, re-evaluated lazily.

    Keys only grow as the spread counters fill, so a popped item whose key is unchanged is the
    cheapest left; one whose key grew goes back in. The caller updates the counters between
    pulls. This keeps picking a canary out of thousands of nodes near-linear.
    """
    heap = [(key(item), i) for i, item in enumerate(items)]
    heapq.heapify(heap)
    while heap:
        old, i = heapq.heappop(heap)
        item = items[i]
        if not usable(item):
            continue
        new = key(item)
        if new != old:
            heapq.heappush(heap, (new, i))
            continue
        yield item


def choose_canary(
    units: list[Unit], *, min_per_stratum: int, min_total: int = 0, seed: str
) -> CanaryChoice:
    """Pick the canary units and each stratum's controls.

    Args:
        units: every unit that moves (see ``units.units_of``).
        min_per_stratum: the change class's minimum canary nodes per stratum.
        min_total: a strategy's canary size in nodes; filled after every stratum is covered.
        seed: the tie-breaking seed.
    """
    members: dict[Stratum, list[tuple[Node, Unit]]] = defaultdict(list)
    for unit in units:
        for node in unit.nodes:
            members[node.stratum].append((node, unit))
    ranks = {n.id: rank(seed, n.id) for u in units for n in u.nodes}
    chosen: dict[str, Unit] = {}
    in_canary: Counter[Stratum] = Counter()
    spread = _Spread()

    def take(unit: Unit) -> None:
        chosen[unit.key] = unit
        spread.add(unit.nodes)
        for node in unit.nodes:
            in_canary[node.stratum] += 1

    for stratum in sorted(members):
        need = min(min_per_stratum, len(members[stratum]))
        # The best node of this stratum whose unit is not yet in; its unit comes with it. A
        # smaller unit is preferred so a domain does not swell the canary needlessly.
        best = _cheapest(
            members[stratum],
            key=lambda nu: (_unfitness(nu[0]), spread.cost(nu[0]), nu[1].size, ranks[nu[0].id]),
            usable=lambda nu: nu[1].key not in chosen,
        )
        while in_canary[stratum] < need:
            take(next(best)[1])
    if sum(in_canary.values()) < min_total:
        rest = sorted(
            (u for u in units if u.key not in chosen),
            key=lambda u: (min(_unfitness(n) for n in u.nodes), u.rank),
        )
        for unit in rest:
            if sum(in_canary.values()) >= min_total:
                break
            take(unit)
    return CanaryChoice(
        tuple(sorted(chosen.values(), key=lambda u: u.key)),
        tuple(_cover(s, members[s], chosen, ranks) for s in sorted(members)),
    )


def _cover(
    stratum: Stratum,
    members: list[tuple[Node, Unit]],
    chosen: dict[str, Unit],
    ranks: dict[str, int],
) -> StratumCover:
    canary = sorted(n.id for n, u in members if u.key in chosen)
    # Controls: untouched nodes of the same stratum, as many as the canary has, healthy and
    # conformant first (a sick baseline hides a regression), spread like the canary.
    spread = _Spread()
    best = _cheapest(
        [n for n, u in members if u.key not in chosen],
        key=lambda n: (_unfitness(n)[:2], spread.cost(n), ranks[n.id]),
        usable=lambda n: True,
    )
    controls: list[str] = []
    for node in best:
        if len(controls) >= len(canary):
            break
        spread.add((node,))
        controls.append(node.id)
    return StratumCover(stratum, len(members), tuple(canary), tuple(sorted(controls)))
