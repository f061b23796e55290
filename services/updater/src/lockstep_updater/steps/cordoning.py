"""``cordoning``: the wait for a place in the pool's out-of-service budget. The budget check and
the move to draining commit in one transaction, under the pool's lock (``StepContext.take_out``):
two workers cannot both take the pool's last place. A node that must wait is parked until a
place frees, in that same transaction."""

from __future__ import annotations

from lockstep_common.events.v1 import FleetNode
from lockstep_updater.domain.guard import Verdict
from lockstep_updater.domain.progress import Progress
from lockstep_updater.domain.steps import NodeStep
from lockstep_updater.steps.context import StepContext
from lockstep_updater.steps.ends import stop_unless_proceed
from lockstep_updater.store import Claim

S = NodeStep
LEADS_TO = frozenset({S.CORDONING, S.DRAINING, S.CANCELLED, S.FAILED})


async def run(
    ctx: StepContext, claim: Claim, node: FleetNode, progress: Progress, started: float
) -> None:
    decision = await ctx.take_out(claim, node, progress)
    if decision.verdict in (Verdict.PROCEED, Verdict.WAIT):
        return  # moved to draining, or parked, with the check (``take_out``)
    stop_unless_proceed(decision)
