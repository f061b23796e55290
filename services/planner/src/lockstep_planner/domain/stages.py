"""A wave's gated stages and the jobs inside each (issue 10, deliverable 5).

Layers run from reversible to one-way (``fleet.LAYER_ORDER``), each its own stage with a gate
after it (seed 000: "gating each layer on a health check before touching the next"). Inside a
stage a job is what goes out of service together: one node, or for switch firmware one whole
fabric domain (seed 002), or one node whose baseboard carries its own switches (HGX). PSU/BBU
firmware is two stages, side A then side B, so the nodes on one feed are never touched while
the other feed is being flashed (seed 000: "redundant-side at a time").
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from lockstep_planner.domain.fleet import (
    LAYER_ORDER,
    Bundle,
    BundleComponent,
    ComponentKind,
    Node,
    PowerSide,
)
from lockstep_planner.domain.units import Unit

FABRIC_SLOTS = "\x00fabric-domains"
"""The resource a class's ``max_fabric_domains_at_once`` caps; no pool can have this name."""


@dataclass(frozen=True, slots=True)
class Job:
    """Nodes taken out of service together for ``duration`` seconds."""

    key: str
    node_ids: tuple[str, ...]
    demand: tuple[tuple[str, int], ...]
    """Slots taken per resource: each pool's nodes, and one ``FABRIC_SLOTS`` for a domain."""
    duration: int

    @property
    def label(self) -> str:
        """How a refusal names it."""
        domain = self.key.removeprefix("domain:")
        return f"fabric domain {domain}" if domain != self.key else f"node {self.key}"


@dataclass(frozen=True, slots=True)
class StageSpec:
    """What one stage must do, before it is placed in time."""

    kind: ComponentKind
    power_side: PowerSide | None
    components: tuple[str, ...]
    node_ids: tuple[str, ...]
    prestage_s: int
    """Impactless staging done in service, on every node at once, before the first outage."""
    jobs: tuple[Job, ...]


def _costs(components: list[BundleComponent]) -> tuple[int, int]:
    return sum(c.outage_s for c in components), sum(c.prestage_s for c in components)


def stage_specs(
    wave: tuple[Unit, ...], bundle: Bundle, *, fabric_cap: int | None
) -> list[StageSpec]:
    """The stages of one wave, in layer order; layers with nothing to do are left out."""
    nodes = sorted((n for u in wave for n in u.nodes), key=lambda n: n.id)
    specs: list[StageSpec] = []
    for kind in LAYER_ORDER:
        layer = [c for c in bundle.components if c.kind is kind]
        if not layer:
            continue
        if kind is ComponentKind.FABRIC_SWITCH:
            spec = _fabric_stage(nodes, layer, fabric_cap)
            if spec is not None:
                specs.append(spec)
            continue
        sides: tuple[PowerSide | None, ...] = (
            (PowerSide.A, PowerSide.B) if kind is ComponentKind.PSU_BBU else (None,)
        )
        for side in sides:
            members = [n for n in nodes if side is None or n.power_side is side]
            spec = _node_stage(kind, side, members, layer)
            if spec is not None:
                specs.append(spec)
    return specs


def _node_stage(
    kind: ComponentKind, side: PowerSide | None, nodes: list[Node], layer: list[BundleComponent]
) -> StageSpec | None:
    per_profile: dict[str, tuple[list[BundleComponent], int, int]] = {}
    jobs: list[Job] = []
    prestage = 0
    for node in nodes:
        if node.profile not in per_profile:
            applicable = [c for c in layer if c.applies_to(node.profile)]
            per_profile[node.profile] = (applicable, *_costs(applicable))
        applicable, outage, pre = per_profile[node.profile]
        if not applicable:
            continue
        prestage = max(prestage, pre)
        jobs.append(Job(node.id, (node.id,), ((node.pool, 1),), outage))
    if not jobs:
        return None
    used = {c.name for comps, _, _ in per_profile.values() for c in comps}
    return StageSpec(
        kind,
        side,
        tuple(c.name for c in layer if c.name in used),
        tuple(j.key for j in jobs),
        prestage,
        tuple(jobs),
    )


def _fabric_stage(
    nodes: list[Node], layer: list[BundleComponent], fabric_cap: int | None
) -> StageSpec | None:
    """Switch firmware: one job per fabric domain, taking the whole domain out together; a node
    outside any shared domain (an HGX baseboard carries its own NVSwitches: its NVLink domain is
    the node) is a domain of one, its own job. Either way a job takes one of the class's
    fabric-domain slots (power_fabric: one domain at a time), so a baseboard's switch flash is
    staged under the same rules as an NVL72 domain's."""
    domains: dict[str, list[Node]] = {}
    for node in nodes:
        key = f"domain:{node.fabric_domain}" if node.fabric_domain is not None else node.id
        domains.setdefault(key, []).append(node)
    jobs: list[Job] = []
    used: set[str] = set()
    prestage = 0
    for key, members in sorted(domains.items()):
        profiles = {n.profile for n in members}
        applicable = [c for c in layer if any(c.applies_to(p) for p in profiles)]
        if not applicable:
            continue
        used.update(c.name for c in applicable)
        outage, pre = _costs(applicable)
        prestage = max(prestage, pre)
        demand = sorted(Counter(n.pool for n in members).items())
        if fabric_cap is not None:
            demand.append((FABRIC_SLOTS, 1))
        jobs.append(Job(key, tuple(n.id for n in members), tuple(demand), outage))
    if not jobs:
        return None
    return StageSpec(
        ComponentKind.FABRIC_SWITCH,
        None,
        tuple(c.name for c in layer if c.name in used),
        tuple(sorted(i for j in jobs for i in j.node_ids)),
        prestage,
        tuple(jobs),
    )
