"""``draining``: cordon the node (once more each run: idempotent) and wait until its jobs have
ended. A foreign drain leaves the node untouched; a drain not done by the deadline is given
back and the node skipped (reliability.md E1/E2); a halted rollout gives the node back."""

from __future__ import annotations

from lockstep_common.events.v1 import FleetNode
from lockstep_updater.domain.guard import Verdict
from lockstep_updater.domain.progress import Progress
from lockstep_updater.domain.steps import NodeStep
from lockstep_updater.ports import DrainState, ExplainsDrain, ForeignDrain
from lockstep_updater.steps.context import StepContext
from lockstep_updater.steps.ends import Stop, ending
from lockstep_updater.steps.lease_fence import fence_write
from lockstep_updater.store import REMEDY, Claim

S = NodeStep
LEADS_TO = frozenset({S.DRAINING, S.ACTIVATING, S.IN_BAND, S.UNCORDONING})


async def run(
    ctx: StepContext, claim: Claim, node: FleetNode, progress: Progress, started: float
) -> None:
    decision = await ctx.check(claim, node, takes_out=False)
    if decision.verdict is not Verdict.PROCEED:
        progress.ending = ending(decision)
        raise Stop(S.UNCORDONING, decision.reason)
    purpose = "gsp/driver mismatch" if claim.kind == REMEDY else "rollout"
    try:
        fence_write()  # not after this worker's lease may have lapsed (lease_fence)
        await ctx.scheduler.cordon(claim.node_id, f"lockstep {purpose} {claim.rollout_id}")
    except ForeignDrain as exc:
        # Skipped: counted failed in the wave's result, but the node's running firmware
        # did not change, so no device.failed for the gate to blame the image for.
        progress.skipped = True
        raise Stop(S.FAILED, f"left untouched: {exc}") from None
    await ctx.keep_cordon_only_if_held(claim)
    state = await ctx.scheduler.drain_state(claim.node_id)
    now = ctx.wall()
    if state is DrainState.DRAINED:
        after = S.IN_BAND if claim.kind == REMEDY else S.ACTIVATING
        await ctx.commit(claim, after, "", progress)
    elif state is DrainState.NOT_DRAINED:
        raise Stop(S.FAILED, "the node was resumed by someone else while draining")
    elif now - (progress.cordoned_at or now) > ctx.policy.drain_deadline_s:
        # Skipped (reliability.md E1/E2): given back, and counted failed in the wave's
        # result, but nothing on the node changed, so no device.failed for the gate to
        # blame the image for.
        progress.ending = S.FAILED
        progress.skipped = True
        why = None
        if isinstance(ctx.scheduler, ExplainsDrain):
            why = ctx.scheduler.drain_blocker(claim.node_id)
        reason = f"skipped: not drained within {ctx.policy.drain_deadline_s:g}s"
        raise Stop(S.UNCORDONING, f"{reason}: {why}" if why else reason)
    else:
        await ctx.commit(claim, S.DRAINING, "draining", progress, ctx.policy.drain_poll_s)
