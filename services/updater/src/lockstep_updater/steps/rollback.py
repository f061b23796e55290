"""``preflight`` of a flip back after a tripped gate (kind ``rollback``): once the node's update
has ended, which of its A/B images did it activate? None: nothing to undo. Else the previous
images, still in the other bank, are the targets of the usual steps from cordoning on (drain,
switch banks, wait for the BMC, read back, give the node back)."""

from __future__ import annotations

from lockstep_common.events.v1 import FleetNode
from lockstep_updater.domain.progress import (
    ComponentPlan,
    Progress,
    RollbackProgress,
    UpdateProgress,
)
from lockstep_updater.domain.steps import TERMINAL, NodeStep
from lockstep_updater.steps.context import StepContext
from lockstep_updater.steps.ends import Stop
from lockstep_updater.store import Claim

S = NodeStep


async def run(
    ctx: StepContext, claim: Claim, node: FleetNode, progress: Progress, started: float
) -> None:
    assert isinstance(progress, RollbackProgress)  # noqa: S101 - STEPS runs it for rollbacks
    update = await ctx.update_item(claim)
    if update is not None and update[0] not in TERMINAL:
        await ctx.commit(
            claim, S.PREFLIGHT, "waiting for the update to end", progress, ctx.policy.retry_s
        )
        return
    done = UpdateProgress() if update is None else update[1]
    assert isinstance(done, UpdateProgress)  # noqa: S101 - the model of an update item
    activated = {
        name: plan
        for name, plan in done.components.items()
        if done.activate_sent and plan.banks == "ab" and plan.staged
    }
    if not activated:
        await ctx.commit(
            claim, S.CANCELLED, "nothing was activated: nothing to flip back", progress
        )
        return
    progress.rollback = True
    progress.components = {}
    for name, plan in activated.items():
        previous = [v for v in plan.before.values() if v]
        if not previous:
            raise Stop(S.FAILED, f"{name}: the version before the update is unknown")
        progress.components[name] = ComponentPlan(
            version=previous[0],
            banks="ab",
            targets=plan.targets,
            before=dict.fromkeys(plan.targets, plan.version),
            staged=True,  # the previous image waits in the other bank
        )
    # Through staging (nothing to push: every image is in place) to cordoning.
    await ctx.commit(claim, S.STAGING, "flip back: the previous images", progress)
