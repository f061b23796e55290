"""A node's drift set and its admission verdict, from its reports, pin and rollout facts (pure)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from lockstep_common.compatibility.rules import CompatibilityRules
from lockstep_common.events.v1 import DriftItem, NodeAdmission
from lockstep_common.vocabulary import Component, DriftKind, ObservationSource, clip_text
from lockstep_inventory.domain.drift import classify
from lockstep_inventory.domain.fleet_file import NodeEntry
from lockstep_inventory.domain.members import version_set
from lockstep_inventory.domain.observation import IN_BAND, Observation, merge
from lockstep_inventory.domain.pins import Pin

# Drift kinds that make a node unfit for any job, whatever stack the job asks for.
UNFIT: frozenset[DriftKind] = frozenset({DriftKind.INCOMPATIBLE, DriftKind.GSP_MISMATCH})


@dataclass(frozen=True, slots=True)
class RolloutFacts:
    """What the rollout side recorded about a node."""

    active_wave: str | None = None  # rollout id of the wave the node is in
    recorded: Mapping[Component, str] = field(default_factory=dict)  # last to_version per step


def source_of(component: Component) -> ObservationSource:
    """Which source reports a component: the node itself for in-band ones, else the BMC."""
    return ObservationSource.AGENT if component in IN_BAND else ObservationSource.REDFISH


def evaluate(
    node: NodeEntry,
    observations: Mapping[ObservationSource, Observation],
    pin: Pin | None,
    facts: RolloutFacts,
    *,
    today: dt.date,
    rules: CompatibilityRules,
) -> tuple[DriftItem, ...]:
    """Every drift item of the node (see ``drift.classify``)."""
    merged = merge(observations)
    pinned = pin.pinned(node.profile) if pin else None
    if pinned is not None:
        # A component is judged once the source that reports it has said anything: before the
        # first agent report, or while a BMC has never once been readable, its versions are
        # "not yet seen" (the node is unreadable or unobserved), not "missing".
        seen = {s for s, o in observations.items() if o.readable or o.members or o.components}
        pinned = {c: v for c, v in pinned.items() if source_of(c) in seen}
    differing = [
        c for c, v in (pinned or {}).items() if c in merged.actual and merged.actual[c] != v
    ]
    # A difference is "explained" only when a rollout step recorded exactly the version seen.
    recorded = bool(differing) and all(facts.recorded.get(c) == merged.actual[c] for c in differing)
    return classify(
        merged.actual,
        pinned,
        in_active_wave=facts.active_wave is not None,
        recorded_change=recorded,
        profile=node.profile,
        today=today,
        conflicts=merged.conflicts,
        firmware_dirs=merged.firmware_dirs,
        loaded_module=merged.loaded_module,
        rules=rules,
    )


def admission(
    node_id: str,
    node: NodeEntry | None,
    stack_hash: str,
    stack: Mapping[str, Mapping[Component, str]] | None,
    observations: Mapping[ObservationSource, Observation],
    drift: Sequence[DriftItem],
    facts: RolloutFacts,
    *,
    now: dt.datetime,
    max_age: dt.timedelta,
) -> NodeAdmission:
    """Whether a job that needs stack ``stack_hash`` may run on the node, and every reason not.

    The node must be registered, readable and recently observed (by its BMC, and by its agent
    when the stack pins in-band components), outside any
    active wave, carry exactly the stack's versions for its profile, and break no compatibility
    rule. Anything unknown refuses: a scheduler prolog must fail closed.
    """
    reasons: list[str] = []
    if node is None:
        return NodeAdmission(node_id=node_id, admitted=False, reasons=("node is not registered",))
    if stack is None:
        reasons.append(f"stack {stack_hash[:12]} is unknown to inventory (never pinned)")
    elif node.profile not in stack:
        reasons.append(f"stack {stack_hash[:12]} has no versions for profile {node.profile}")
    wanted = stack.get(node.profile, {}) if stack else {}
    reasons.extend(_freshness(wanted, observations, now=now, max_age=max_age))
    if facts.active_wave is not None:
        reasons.append(f"in an active wave of rollout {facts.active_wave}")
    reasons.extend(_versions(wanted, observations))
    reasons.extend(
        f"{item.kind}: {item.component}: {item.detail}" for item in drift if item.kind in UNFIT
    )
    return NodeAdmission(
        node_id=node_id, admitted=not reasons, reasons=tuple(clip_text(r) for r in reasons)
    )


def _freshness(
    wanted: Mapping[Component, str],
    observations: Mapping[ObservationSource, Observation],
    *,
    now: dt.datetime,
    max_age: dt.timedelta,
) -> list[str]:
    needed = [ObservationSource.REDFISH]
    if any(c in IN_BAND for c in wanted):
        needed.append(ObservationSource.AGENT)  # only the node itself sees in-band versions
    reasons: list[str] = []
    for source in needed:
        obs = observations.get(source)
        if obs is None:
            reasons.append(f"no {source} report yet")
        elif not obs.readable:
            since = obs.unreadable_since or obs.observed_at
            reasons.append(f"{source} unreadable since {since.isoformat()}: {obs.error}")
        elif now - obs.observed_at > max_age:
            reasons.append(f"{source} report is stale (observed {obs.observed_at.isoformat()})")
    return reasons


def _versions(
    wanted: Mapping[Component, str], observations: Mapping[ObservationSource, Observation]
) -> list[str]:
    merged = merge(observations)
    reasons: list[str] = []
    for component, want in sorted(wanted.items()):
        if component in merged.conflicts:
            seen = version_set(merged.conflicts[component])
            if seen != want:
                reasons.append(f"{component}: members run {seen}, job needs {want}")
        elif component not in merged.actual:
            reasons.append(f"{component}: not observed, job needs {want}")
        elif merged.actual[component] != want:
            reasons.append(f"{component}: runs {merged.actual[component]}, job needs {want}")
    return reasons
