"""Which nodes an intent moves, which it leaves alone and why (issue 10, deliverables 2 and 9).

A node already at the target is left alone ("already at target" is success, design.md
non-negotiable 4). A node with unexplained drift or an unreadable BMC is excluded with the
reason or refuses the whole intent, as the change class says: moving a node whose actual state
is unknown or unexplained would hide the drift under the rollout. When the bundle carries
switch firmware, fabric domains are taken whole (seed 002): a domain with an excluded member is
excluded with it, members already at target move with the rest, and a domain that the scope
cuts in two is refused, since its switch flash would take the nodes outside the scope down too.
A domain the caller names as deferred (a job occupies it: seed 002, the update "waits until the
domain is next unoccupied") stays out of every wave; its exclusion reason starts with
:data:`DEFERRED`, and the caller picks it up once it is free.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

from lockstep_common.events.v1 import ScopeSelector
from lockstep_common.vocabulary import ChangeClass
from lockstep_planner.domain.classes import UnfitNodes
from lockstep_planner.domain.fleet import Bundle, Node
from lockstep_planner.domain.refusal import some

AT_TARGET = "already at the target stack"
DEFERRED = "deferred: "
"""Prefix of the exclusion reason of a node whose fabric domain is deferred."""


@dataclass(frozen=True, slots=True)
class Exclusion:
    """A node in scope that the plan leaves alone, and why."""

    node_id: str
    reason: str


def in_scope(node: Node, scope: ScopeSelector) -> bool:
    """Every non-empty axis of the selector must match (design.md: empty means any)."""
    return (
        (not scope.sites or node.site in scope.sites)
        and (not scope.pools or node.pool in scope.pools)
        and (not scope.profiles or node.profile in scope.profiles)
        and (not scope.fabric_domains or node.fabric_domain in scope.fabric_domains)
        and (not scope.nodes or node.id in scope.nodes)
    )


def _why_unfit(node: Node) -> str | None:
    if not node.readable:
        return "BMC unreadable: its actual versions are unknown"
    if node.drifted:
        return "unexplained drift: explain or fix it first"
    return None


def select(
    fleet: tuple[Node, ...],
    scope: ScopeSelector,
    bundle: Bundle,
    *,
    change_class: ChangeClass,
    unfit_nodes: UnfitNodes,
    reasons: list[str],
    deferred: Mapping[str, str] | None = None,
) -> tuple[list[Node], list[Exclusion]]:
    """The nodes that move and the exclusions, in node-id order; refusals go to ``reasons``.

    ``deferred``: fabric domain -> why it waits (only when the bundle moves switch firmware)."""
    deferred = deferred or {}
    unknown = set(scope.nodes) - {n.id for n in fleet}
    if unknown:
        reasons.append(f"scope names unknown node(s): {some(unknown)}")
    chosen = sorted((n for n in fleet if in_scope(n, scope)), key=lambda n: n.id)
    if not chosen:
        reasons.append("scope matches no node")
        return [], []
    unfit = {n.id: why for n in chosen if (why := _why_unfit(n)) is not None}
    if unfit and unfit_nodes is UnfitNodes.REFUSE:
        for why in sorted(set(unfit.values())):
            ids = [i for i, w in unfit.items() if w == why]
            reasons.append(f"{why} (change class {change_class}): {some(ids)}")
    groups: dict[str, list[Node]] = defaultdict(list)
    for node in chosen:
        whole = bundle.moves_fabric and node.fabric_domain is not None
        groups[f"domain:{node.fabric_domain}" if whole else f"node:{node.id}"].append(node)
    if bundle.moves_fabric:
        reasons.extend(_cut_domains(fleet, chosen))
    moving: list[Node] = []
    excluded: list[Exclusion] = []
    for key, members in sorted(groups.items()):
        left = _left_alone(key, members, unfit, bundle, deferred)
        if left:
            excluded.extend(left)
        else:
            moving.extend(members)
    if not moving and not reasons:
        reasons.append(
            "no node in scope can move: " + "; ".join(sorted({e.reason for e in excluded}))
        )
    return sorted(moving, key=lambda n: n.id), sorted(excluded, key=lambda e: e.node_id)


def _left_alone(
    key: str,
    members: list[Node],
    unfit: Mapping[str, str],
    bundle: Bundle,
    deferred: Mapping[str, str],
) -> list[Exclusion]:
    """Why a group that moves as one (a node, or a whole fabric domain) stays put; [] if not."""
    bad = [n for n in members if n.id in unfit]
    if bad and len(members) > 1:
        named = ", ".join(f"{n.id} ({unfit[n.id]})" for n in bad[:3])
        reason = f"{key.replace(':', ' ')} moves whole and has an excluded node: {named}"
        return [Exclusion(n.id, unfit.get(n.id, reason)) for n in members]
    if bad:
        return [Exclusion(bad[0].id, unfit[bad[0].id])]
    if all(n.stack == bundle.stack for n in members):
        return [Exclusion(n.id, AT_TARGET) for n in members]
    domain = key.removeprefix("domain:")
    if key.startswith("domain:") and domain in deferred:
        return [Exclusion(n.id, DEFERRED + deferred[domain]) for n in members]
    return []


def _cut_domains(fleet: tuple[Node, ...], chosen: list[Node]) -> list[str]:
    chosen_ids = {n.id for n in chosen}
    touched = {n.fabric_domain for n in chosen if n.fabric_domain is not None}
    left: dict[str, list[str]] = defaultdict(list)
    for node in fleet:
        if node.fabric_domain in touched and node.id not in chosen_ids:
            left[node.fabric_domain].append(node.id)
    return [
        f"fabric domain {domain}: switch firmware moves the whole domain, but the scope leaves "
        f"out {some(ids)}"
        for domain, ids in sorted(left.items())
    ]
