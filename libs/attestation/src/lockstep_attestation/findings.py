"""A check's result, as the checks report it (timed and wrapped into events by the caller)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Finding:
    """One check's result."""

    check: str
    passed: bool
    reason: str
