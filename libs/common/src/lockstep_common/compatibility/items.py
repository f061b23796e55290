"""Drift items: each kind's severity (one table), and the one way an item is built."""

from __future__ import annotations

from collections.abc import Mapping

from lockstep_common.events.v1 import DriftItem
from lockstep_common.vocabulary import Component, DriftKind, Severity, clip_text

SEVERITY: Mapping[DriftKind, Severity] = {
    DriftKind.PENDING: Severity.INFO,
    DriftKind.UNEXPECTED: Severity.CRITICAL,
    DriftKind.MISSING: Severity.WARNING,
    DriftKind.UNKNOWN: Severity.INFO,
    DriftKind.INCOMPATIBLE: Severity.CRITICAL,
    DriftKind.GSP_MISMATCH: Severity.CRITICAL,
}


def drift_item(
    component: Component,
    expected: str | None,
    actual: str | None,
    kind: DriftKind,
    detail: str,
    severity: Severity | None = None,
) -> DriftItem:
    """One item; ``severity`` defaults to the kind's (:data:`SEVERITY`), and a ``detail`` too long
    for the event is clipped rather than refusing the drift."""
    return DriftItem(
        component=component,
        expected=expected,
        actual=actual,
        kind=kind,
        severity=severity or SEVERITY[kind],
        detail=clip_text(detail),
    )
