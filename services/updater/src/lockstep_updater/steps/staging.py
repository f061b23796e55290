"""``staging``: push each A/B image to its inactive bank while the node still runs its jobs
(impactless staging, standards.md section 2), where the node's BMC profile lets the written
image wait (``Stage``, or the profile's activation reset; ``bmc_profile.stages_in_service``):
a profile whose push runs the image at once has it pushed in ``activating``, drained. Every
target found at the version meanwhile (written by someone else): done without a drain."""

from __future__ import annotations

from lockstep_common.events.v1 import DeviceStaged, FleetNode
from lockstep_common.vocabulary import DeviceOutcome
from lockstep_updater.domain.progress import (
    Progress,
    RollbackProgress,
    UpdateProgress,
    firmware,
)
from lockstep_updater.domain.steps import NodeStep
from lockstep_updater.steps.bmc_profile import profile_of, stages_in_service
from lockstep_updater.steps.context import Events, StepContext
from lockstep_updater.steps.ends import Stop
from lockstep_updater.steps.push import push
from lockstep_updater.store import Claim

S = NodeStep
LEADS_TO = frozenset({S.STAGING, S.CORDONING, S.DONE, S.CANCELLED, S.FAILED})


async def run(
    ctx: StepContext, claim: Claim, node: FleetNode, progress: Progress, started: float
) -> None:
    held = firmware(progress)
    events: Events = []
    target = await ctx.target(claim)
    if target is None:
        raise Stop(S.FAILED, "the plan's attested bundle is no longer known")
    in_service = stages_in_service(profile_of(held))
    for name, plan in held.components.items():
        if plan.done or plan.banks != "ab" or plan.staged or not in_service:
            continue
        await push(ctx, claim, node, target, name, plan, held, stage=True)
        if plan.done:
            continue
        plan.staged = True
        if not isinstance(held, RollbackProgress):  # a flip-back's outcome: device.rolled_back
            event = ctx.device(DeviceStaged, claim, name, plan, started)
            events.append((DeviceOutcome.STAGED, event))
    in_band = isinstance(held, UpdateProgress) and held.in_band
    if all(p.done for p in held.components.values()) and not in_band:
        # Someone else brought every target to the version meanwhile: no drain needed.
        await ctx.commit(claim, S.DONE, "at the target: nothing written", held, events=events)
        return
    await ctx.commit(claim, S.CORDONING, "", held, events=events)
