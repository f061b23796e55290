"""``verifying``: read every target back: success is the version read, never a task state.
A flip back's outcome is ``device.rolled_back``; in-band work follows, else the node is given
back."""

from __future__ import annotations

from lockstep_common.events.v1 import DeviceRolledBack, DeviceVerified, FleetNode
from lockstep_common.vocabulary import Component, DeviceOutcome
from lockstep_redfish.errors import BmcError, BmcUnavailable
from lockstep_redfish.preflight import UpdateRequest
from lockstep_redfish.update import FirmwareUpdate
from lockstep_updater.domain.progress import (
    Progress,
    RollbackProgress,
    UpdateProgress,
    firmware,
)
from lockstep_updater.domain.steps import NodeStep
from lockstep_updater.steps.context import Events, StepContext
from lockstep_updater.steps.ends import Stop
from lockstep_updater.steps.plans import first_before
from lockstep_updater.store import Claim

S = NodeStep
LEADS_TO = frozenset({S.VERIFYING, S.IN_BAND, S.UNCORDONING, S.QUARANTINED})


async def run(
    ctx: StepContext, claim: Claim, node: FleetNode, progress: Progress, started: float
) -> None:
    held = firmware(progress)
    rollback = isinstance(held, RollbackProgress) and held.rollback
    events: Events = []
    async with ctx.session(node, held) as bmc:
        update = FirmwareUpdate(bmc, ctx.policy.update, expand=held.bmc_expand)
        for name, plan in held.components.items():
            if plan.done:
                continue
            request = UpdateRequest(tuple(plan.targets), plan.version)
            try:
                await update.verify(request, plan.before)
            except BmcUnavailable:
                raise
            except BmcError as exc:
                raise Stop(S.QUARANTINED, f"{name}: {exc}") from None
            plan.done = True
            if rollback:
                rolled = DeviceRolledBack(
                    rollout_id=claim.rollout_id,
                    node_id=claim.node_id,
                    component=Component(name),
                    from_version=first_before(plan),
                    to_version=plan.version,
                    duration_s=round(ctx.clock.monotonic() - started, 3),
                    reason=f"gate tripped on wave {claim.wave}",
                    mechanism=held.mechanism if isinstance(held, RollbackProgress) else None,
                )
                events.append((DeviceOutcome.ROLLED_BACK, rolled))
                continue
            events.append(
                (DeviceOutcome.VERIFIED, ctx.device(DeviceVerified, claim, name, plan, started))
            )
    held.ending = S.DONE
    after = S.IN_BAND if isinstance(held, UpdateProgress) and held.in_band else S.UNCORDONING
    await ctx.commit(claim, after, "", held, events=events)
