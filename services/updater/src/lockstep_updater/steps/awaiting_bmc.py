"""``awaiting_bmc``: a BMC may reset after an activation and refuse even a login for minutes
(reliability.md 7.D2): it is tried once per turn; a BMC that does not answer is waited for up
to ``reachable_s`` (the executor's ``retry_or_give_up``), then the node is quarantined."""

from __future__ import annotations

from lockstep_common.events.v1 import FleetNode
from lockstep_updater.domain.progress import Progress
from lockstep_updater.domain.steps import NodeStep
from lockstep_updater.steps.context import StepContext
from lockstep_updater.store import Claim

S = NodeStep
LEADS_TO = frozenset({S.AWAITING_BMC, S.VERIFYING, S.QUARANTINED})


async def run(
    ctx: StepContext, claim: Claim, node: FleetNode, progress: Progress, started: float
) -> None:
    async with ctx.session(node, progress) as bmc:
        await bmc.get("/redfish/v1/")
    await ctx.commit(claim, S.VERIFYING, "", progress)
