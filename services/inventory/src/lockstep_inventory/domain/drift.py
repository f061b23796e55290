"""Drift classification and the emit-only-on-change decision (design.md "inventory").

Kinds and severities (one table, :data:`.items.SEVERITY`):

- ``pending`` (info): the node is in an active wave, so a difference from the pin is the rollout
  in progress. Also (warning) a difference outside any wave that a recorded rollout step explains
  (``recorded_change=True``: a halted wave, a quarantined node awaiting retry).
- ``unexpected`` (critical): the version changed and no rollout recorded it: a hand hot-fix, an RMA
  part with factory firmware, a silent revert. Unattested bits on a node: critical.
- ``missing`` (warning): a pinned component is not observed (dead device, BMC not reporting it).
- ``unknown`` (info): a component is observed but not pinned, or the node has no pin at all (every
  observed component is then unknown). Members no mapping rule knows have no :class:`Component`
  and cannot be drift items: they stay raw in ``InventoryObserved.members``.
- ``incompatible`` / ``gsp_mismatch``: from :func:`.rules.check_compatibility` (critical, or
  warning for advisory rules such as an end-of-life branch).

A member conflict (4 GPUs, one on another VBIOS) is drift of that component: ``pending`` during a
wave (GPUs flash one after another), else ``unexpected``; ``actual`` lists the distinct versions
joined by ``|``. A pin that names exactly that set (``"0.2.1.1|0.2.1.8"``) accepts it: boards
whose members run different images by design (GB200 CPLDs) are pinned that way.
"""

from __future__ import annotations

import datetime as dt
import enum
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from lockstep_common.compatibility.items import drift_item
from lockstep_common.compatibility.rules import CompatibilityRules, check_compatibility
from lockstep_common.events.v1 import DriftItem
from lockstep_common.vocabulary import Component, DriftKind, Severity
from lockstep_inventory.domain.members import version_set


def _difference(
    component: Component,
    pinned: str,
    actual: str,
    *,
    in_active_wave: bool,
    recorded_change: bool,
    what: str,
) -> DriftItem:
    if in_active_wave:
        return drift_item(
            component, pinned, actual, DriftKind.PENDING, f"{what}; node in active wave"
        )
    if recorded_change:
        return drift_item(
            component,
            pinned,
            actual,
            DriftKind.PENDING,
            f"{what}; a recorded rollout step explains it, no wave is active",
            Severity.WARNING,
        )
    return drift_item(
        component,
        pinned,
        actual,
        DriftKind.UNEXPECTED,
        f"{what}; no rollout recorded (hot-fix, RMA part or silent revert)",
    )


def _versions_text(by_member: Mapping[str, str]) -> str:
    return version_set(by_member)[:128]  # a DriftItem version holds at most 128 characters


def classify(
    actual: Mapping[Component, str],
    pinned: Mapping[Component, str] | None,
    *,
    in_active_wave: bool,
    recorded_change: bool,
    profile: str,
    today: dt.date,
    conflicts: Mapping[Component, Mapping[str, str]] | None = None,
    firmware_dirs: Sequence[str] | None = None,
    loaded_module: str | None = None,
    rules: CompatibilityRules,
) -> tuple[DriftItem, ...]:
    """Every drift item of one node, sorted by (component, kind) so equal sets compare equal."""
    conflicts = conflicts or {}
    items: list[DriftItem] = []
    if pinned is None:
        items.extend(
            drift_item(c, None, v, DriftKind.UNKNOWN, "node has no pin") for c, v in actual.items()
        )
        items.extend(
            drift_item(
                c, None, _versions_text(m), DriftKind.UNKNOWN, "node has no pin; members differ"
            )
            for c, m in conflicts.items()
        )
    else:
        for component, want in pinned.items():
            if component in conflicts:
                members = conflicts[component]
                if want == version_set(members):
                    continue  # pinned as the set of versions its members carry (pins.py)
                what = "members differ: " + ", ".join(f"{k}={v}" for k, v in members.items())
                items.append(
                    _difference(
                        component,
                        want,
                        _versions_text(members),
                        in_active_wave=in_active_wave,
                        recorded_change=recorded_change,
                        what=what,
                    )
                )
            elif component not in actual:
                items.append(
                    drift_item(component, want, None, DriftKind.MISSING, "pinned, not observed")
                )
            elif actual[component] != want:
                items.append(
                    _difference(
                        component,
                        want,
                        actual[component],
                        in_active_wave=in_active_wave,
                        recorded_change=recorded_change,
                        what="version differs from pin",
                    )
                )
        for component in sorted(set(actual) | set(conflicts)):
            if component not in pinned:
                seen = actual.get(component) or _versions_text(conflicts[component])
                items.append(
                    drift_item(component, None, seen, DriftKind.UNKNOWN, "observed, not pinned")
                )
    items.extend(
        check_compatibility(
            profile,
            actual,
            today=today,
            firmware_dirs=firmware_dirs,
            loaded_module=loaded_module,
            rules=rules,
        )
    )
    return tuple(sorted(items, key=lambda i: (i.component, i.kind, i.expected or "", i.detail)))


def drift_key(items: Iterable[DriftItem]) -> frozenset[tuple[Any, ...]]:
    """What makes two drift sets "the same": everything but the free-text detail."""
    return frozenset((i.component, i.kind, i.severity, i.expected, i.actual) for i in items)


class Emit(enum.StrEnum):
    """What a report leads to."""

    DETECTED = "drift.detected"
    RESOLVED = "drift.resolved"
    NOTHING = "nothing"
    IGNORED = "ignored"  # stale or duplicate report: no state change at all


def decide(
    previous: Collection[DriftItem], current: Collection[DriftItem], *, pinned: bool = True
) -> Emit:
    """``drift.detected`` when the set changed and is not empty, ``drift.resolved`` when it
    became empty, otherwise nothing: never one event per sweep.

    A node with no pin (``pinned=False``) has every component ``unknown``: that is the absence of
    a golden stack, not drift, so only its other items (compatibility) are announced; otherwise a
    fleet's first sweep before any pin would send one ``drift.detected`` per node (issue 14).
    """
    if not pinned:
        previous = [i for i in previous if i.kind is not DriftKind.UNKNOWN]
        current = [i for i in current if i.kind is not DriftKind.UNKNOWN]
    if drift_key(previous) == drift_key(current):
        return Emit.NOTHING
    return Emit.DETECTED if current else Emit.RESOLVED
