"""``uncordoning``: give the node back to the scheduler (only a drain Lockstep made) and end
as recorded (``progress.ending``). Never given up: a node must not stay cordoned by Lockstep."""

from __future__ import annotations

from lockstep_common.events.v1 import FleetNode
from lockstep_updater.domain.progress import Progress
from lockstep_updater.domain.steps import NodeStep
from lockstep_updater.steps.context import StepContext
from lockstep_updater.steps.lease_fence import fence_write
from lockstep_updater.store import Claim

S = NodeStep
LEADS_TO = frozenset({S.UNCORDONING, S.DONE, S.CANCELLED, S.FAILED})


async def run(
    ctx: StepContext, claim: Claim, node: FleetNode, progress: Progress, started: float
) -> None:
    fence_write()  # a stale worker's late resume could undo a later item's drain
    resumed = await ctx.scheduler.resume(claim.node_id)
    ending = progress.ending or S.DONE
    reason = progress.ending_reason or ""
    note = "" if resumed else "; no drain of Lockstep's to undo"
    await ctx.commit(claim, ending, f"{reason}{note}".strip("; "), progress)
