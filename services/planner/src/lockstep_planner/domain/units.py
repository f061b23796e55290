"""Units: the sets of nodes that must move together.

Normally a unit is one node. When the bundle carries fabric-switch firmware, a whole fabric
domain is one unit (seed 002; design.md: "NVSwitch firmware moves a whole unoccupied domain"),
so the canary, the waves and the batches all take domains whole.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from lockstep_planner.domain.fleet import Node
from lockstep_planner.domain.seeded import rank


@dataclass(frozen=True, slots=True)
class Unit:
    """Nodes that move as one; ``key`` is the domain name or the node id."""

    key: str
    nodes: tuple[Node, ...]
    rank: int

    @property
    def size(self) -> int:
        return len(self.nodes)


def units_of(nodes: Iterable[Node], *, by_domain: bool, seed: str) -> list[Unit]:
    """Group ``nodes`` into units (by fabric domain when ``by_domain``), each ordered by node id;
    the list is in key order."""
    groups: dict[str, list[Node]] = {}
    for node in nodes:
        key = (
            f"domain:{node.fabric_domain}"
            if by_domain and node.fabric_domain is not None
            else f"node:{node.id}"
        )
        groups.setdefault(key, []).append(node)
    return [
        Unit(key, tuple(sorted(members, key=lambda n: n.id)), rank(seed, key))
        for key, members in sorted(groups.items())
    ]
