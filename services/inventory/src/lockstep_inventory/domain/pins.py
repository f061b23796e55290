"""Which golden stack a node is pinned to (``pin.changed`` events, design.md "inventory").

A pin names a site, a scope within it and a stack (hardware profile -> component -> version).
The newest pin whose site and scope contain a node is the node's pin; a newer pin for the same
(site, scope) replaces the older one, and an older one arriving late is ignored. A stack without
the node's profile pins nothing on that node.

"Newest" is the broker's order, never the sender's clock: ``sequence`` is the stream sequence
JetStream gave the ``pin.changed`` when it stored it (every pin is in the one ``PINS`` stream,
so sequences of all sites and scopes compare). A sender's ``time`` decides nothing: a pin dated
2999 once won against every later pin (issue 15). A redelivered or retried older pin keeps its
lower sequence, so it still loses. The sequence restarts only if the stream is deleted and
created again; pins held from before then win until replaced, and every pin refused as
older is logged with its sequence (``handlers.on_pin_changed``).

Pin granularity: a component's pinned version is either one version (every member carries it)
or the distinct versions its members must carry, sorted and joined with ``|`` (``"0.2.1.1|0.2.1.8"``
for a board whose two CPLDs run different images by design; see ``drift.classify``).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from lockstep_common.events.v1 import ScopeSelector
from lockstep_common.scopes import SelectorError, parse_selector, selects
from lockstep_common.vocabulary import Component
from lockstep_inventory.domain.fleet_file import NodeEntry
from lockstep_inventory.domain.members import version_set

__all__ = ["Pin", "SelectorError", "parse_selector", "pin_of", "scope_key", "selects", "stack_of"]


@dataclass(frozen=True, slots=True)
class Pin:
    """One pin as the inventory keeps it."""

    site: str
    scope: ScopeSelector
    stack_hash: str
    stack: Mapping[str, Mapping[Component, str]]
    sequence: int  # the PINS stream sequence of its pin.changed: what "newer" means
    occurred_at: dt.datetime  # what the sender said; kept for the record, never compared
    rollout_id: str | None = None

    def covers(self, node: NodeEntry) -> bool:
        """True when the node is in this pin's site and scope."""
        return selects(self.site, self.scope, node)

    def pinned(self, profile: str) -> Mapping[Component, str] | None:
        """Component -> version for a profile, or None when the stack does not name it."""
        return self.stack.get(profile)


def scope_key(scope: ScopeSelector) -> str:
    """Canonical text of a scope: equal scopes, equal keys (the pins table's key)."""
    return json.dumps(scope.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))


def pin_of(node: NodeEntry, pins: Iterable[Pin]) -> Pin | None:
    """The newest pin (highest stream sequence) covering ``node``; ties, which only a test
    can make, are broken by stack hash so the answer is stable."""
    best: Pin | None = None
    for pin in pins:
        if pin.covers(node) and (
            best is None or (pin.sequence, pin.stack_hash) > (best.sequence, best.stack_hash)
        ):
            best = pin
    return best


def stack_of(
    versions: Mapping[Component, str], conflicts: Mapping[Component, Mapping[str, str]]
) -> dict[Component, str]:
    """The profile stack that pins exactly what a node's members run, as its report grouped
    them (``members.versions_of`` under the BMC's profile; conflicts as version sets): how an
    operator turns a known-good node into a pin."""
    stack = dict(versions)
    for component, by_member in conflicts.items():
        stack[component] = version_set(by_member)
    return stack
