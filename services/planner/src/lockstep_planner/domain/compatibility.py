"""Would the target stack break a compatibility rule on the nodes it moves? (issue 10,
deliverable 2: CUDA minimum driver, GSP = driver, fabric manager = driver, architecture
supported by the branch, branch end of life.)

The rules are the inventory's (``lockstep_common.compatibility``), so a rollout the planner lets
start never leaves a node the inventory then calls ``incompatible``. Each node is judged twice,
on what it runs now and on what it would run afterwards (now, with every component the bundle
pins for its profile at the bundle's version):

- a broken rule the target *introduces* (after, not before) refuses the intent, naming the
  profile, the nodes and the rule: the target stack itself fails the rules;
- a node the inventory flags ``incompatible`` or ``gsp_mismatch`` today is still moved when the
  target leaves it with no critical broken rule: the rollout is the remedy (seed 004's GSP
  mismatch is fixed by moving driver and GSP together). Otherwise it stays excluded as drifted;
- a broken rule present before and after (an end-of-life branch moving to a newer minor of the
  same branch, say) is neither: the rollout does not make it worse.

Pure: the rules and ``today`` come in.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from lockstep_common.compatibility.rules import check_compatibility
from lockstep_common.compatibility.table import CompatibilityRules
from lockstep_common.events.v1 import FleetNode
from lockstep_common.vocabulary import Component, Severity
from lockstep_planner.domain.refusal import some

Stack = Mapping[str, Mapping[str, str]]
"""profile -> component -> version, as a pin says it."""


@dataclass(frozen=True, slots=True)
class TargetCheck:
    refusals: tuple[str, ...]
    """One reason per rule the target breaks that the nodes did not break before."""
    remedied: frozenset[str]
    """Nodes the target leaves without a critical broken rule."""


def check_target(
    nodes: Iterable[FleetNode], target: Stack, *, rules: CompatibilityRules, today: dt.date
) -> TargetCheck:
    """Judge ``target`` on ``nodes``. Only nodes whose profile the target pins are judged (a
    bundle for another profile moves nothing there); nodes with the same profile and tuples are
    judged once, so 12,500 nodes of a few stacks cost a few checks."""
    groups: dict[tuple[str, tuple[tuple[Component, str], ...]], list[str]] = defaultdict(list)
    for node in nodes:
        if node.profile in target:
            now = tuple(sorted((Component(c), v) for c, v in node.observed.items()))
            groups[(node.profile, now)].append(node.node_id)
    broken: dict[tuple[str, str], list[str]] = defaultdict(list)
    remedied: set[str] = set()
    for (profile, now), node_ids in groups.items():
        before = check_compatibility(profile, dict(now), today=today, rules=rules)
        known = {i.detail for i in before}
        # What the node would run: its components, the bundle's pinned ones at their version.
        moved = dict(now) | {Component(c): v for c, v in target[profile].items()}
        after = check_compatibility(profile, moved, today=today, rules=rules)
        for item in after:
            if item.detail not in known:
                broken[(profile, item.detail)].extend(node_ids)
        if not any(i.severity is Severity.CRITICAL for i in after):
            remedied.update(node_ids)
    refusals = tuple(
        f"target stack breaks a compatibility rule on {len(ids)} {profile} node(s) "
        f"({some(ids)}): {detail}"
        for (profile, detail), ids in sorted(broken.items())
    )
    return TargetCheck(refusals, frozenset(remedied))
