"""Orphaned drains: a node Lockstep cordoned whose work item no worker has held for the orphan
TTL (the updater that drained it died and nothing took the item over). Nodes must not stay
cordoned without an owner (reliability.md section 7, E3), so the reaper ends such items; what
it does depends only on how far the item came, decided here (pure).

- Drained (or draining) but nothing written to the running firmware yet: give the drain back
  and fail the node with the reason; the node runs what it ran before.
- An activation or a one-way write may have been sent: the firmware may have changed, so the
  node stays out of service, quarantined with the reason (the executor's own rule after a
  failure past the point of change, domain/steps.py).
- Already giving the node back: finish that (resume, end as recorded).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lockstep_updater.domain.steps import NodeStep

S = NodeStep
ORPHANABLE = frozenset({S.DRAINING, S.ACTIVATING, S.UNCORDONING})
"""States in which Lockstep's cordon may hold the node while nothing else will end it."""


def written(progress: Mapping[str, Any]) -> bool:
    """Whether anything that changes the running firmware may have been sent: the staged
    images' activation, or a push to a part without an inactive bank (written in place)."""
    if progress.get("activate_sent"):
        return True
    plans = progress.get("components", {})
    return any(p.get("banks") != "ab" and p.get("sent") for p in plans.values())


def orphan_end(state: NodeStep, progress: Mapping[str, Any]) -> NodeStep:
    """Where the reaper moves an orphaned item in ``state``: ``uncordoning`` to give its drain
    back, or ``quarantined`` when the firmware may have changed."""
    if state not in ORPHANABLE:
        raise ValueError(f"{state.value} holds no drain to reap")
    if state is S.ACTIVATING and written(progress):
        return S.QUARANTINED
    return S.UNCORDONING
