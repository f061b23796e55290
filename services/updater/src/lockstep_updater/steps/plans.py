"""What the attested bundle and a component's plan say about one component: the bundle's
image of it for the node's profile, and the version it ran before the update."""

from __future__ import annotations

from lockstep_common.events.v1 import AttestedComponent, FleetNode
from lockstep_updater.domain.progress import ComponentPlan
from lockstep_updater.domain.steps import NodeStep
from lockstep_updater.steps.ends import Stop
from lockstep_updater.store import Target

S = NodeStep


def first_before(plan: ComponentPlan) -> str | None:
    """The version a component ran before (the first member's that was read)."""
    before = [v for v in plan.before.values() if v]
    return before[0] if before else None


def entry_for(target: Target, node: FleetNode, name: str) -> AttestedComponent:
    """The attested bundle's image of component ``name`` for the node's profile."""
    for entry in target.components:
        if entry.profile == node.profile and entry.component.value == name:
            return entry
    raise Stop(S.FAILED, f"the attested bundle has no {name} image for profile {node.profile}")
