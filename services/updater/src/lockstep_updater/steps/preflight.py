"""``preflight`` of a rollout's update: the guard and the maintenance windows, the attested
bundle, the BMC account's privilege, and per component the members to write and the versions
they run; a node already at the target ends ``done`` without a write."""

from __future__ import annotations

from lockstep_common.events.v1 import DeviceVerified, FleetNode
from lockstep_common.vocabulary import Component, DeviceOutcome
from lockstep_redfish.accounts import session_roles
from lockstep_redfish.errors import BmcError, BmcUnavailable, ImageDigestMismatch
from lockstep_redfish.preflight import UpdateRequest
from lockstep_redfish.update import FirmwareUpdate
from lockstep_updater.adapters.member_devices import member_pci_ids
from lockstep_updater.domain.guard import Verdict
from lockstep_updater.domain.privilege import account_refusal
from lockstep_updater.domain.progress import ComponentPlan, Progress, UpdateProgress
from lockstep_updater.domain.steps import NodeStep
from lockstep_updater.domain.targets import applicable_members, targets_for
from lockstep_updater.steps import in_band
from lockstep_updater.steps.context import Events, StepContext, entry_for
from lockstep_updater.steps.ends import Stop, stop_unless_proceed
from lockstep_updater.store import Claim

S = NodeStep
LEADS_TO = frozenset({S.PREFLIGHT, S.STAGING, S.CORDONING, S.DONE, S.CANCELLED, S.FAILED})
"""Where a preflight of any kind goes (a remedy's straight to cordoning: nothing to stage)."""
FIRMWARE_INVENTORY = "/redfish/v1/UpdateService/FirmwareInventory"


async def run(
    ctx: StepContext, claim: Claim, node: FleetNode, progress: Progress, started: float
) -> None:
    assert isinstance(progress, UpdateProgress)  # noqa: S101 - STEPS runs it for updates only
    decision = await ctx.check(claim, node, takes_out=False, starts_work=True)
    if decision.verdict is Verdict.WAIT:  # outside the maintenance windows: nothing written
        await ctx.commit(claim, S.PREFLIGHT, decision.reason, progress, ctx.policy.budget_recheck_s)
        return
    stop_unless_proceed(decision)
    target = await ctx.target(claim)
    if target is None:
        await ctx.commit(
            claim,
            S.PREFLIGHT,
            "waiting for the plan's attested bundle",
            progress,
            ctx.policy.retry_s,
        )
        return
    progress.pool = node.pool
    plans: dict[str, ComponentPlan] = {}
    agent_side = in_band.names(claim.components)
    if agent_side:
        entries = {name: entry_for(target, node, name) for name in agent_side}
        await in_band.plan_rollout(ctx, claim, node, target, entries, progress)
    async with ctx.session(node) as bmc:
        # Least privilege (reliability.md 7 H5): an Administrator-class account is refused
        # before anything is read for the update, so nothing is ever written with it.
        refusal = account_refusal(*await session_roles(bmc))
        if refusal is not None:
            raise Stop(S.FAILED, f"refused: {refusal}; nothing written")
        update = FirmwareUpdate(bmc, ctx.policy.update)
        members = await update.collection(FIRMWARE_INVENTORY)
        for name in claim.components:
            if name in agent_side:
                continue
            entry = entry_for(target, node, name)
            paths = targets_for(Component(name), members)
            if not paths:
                raise Stop(S.FAILED, f"{name}: no FirmwareInventory member holds it")
            image = ctx.image(target, entry)
            # Only the members whose device the package declares (domain.targets).
            paths = applicable_members(image.data, await member_pci_ids(bmc, paths))
            if not paths:
                raise Stop(S.FAILED, f"{name}: the image applies to none of its members")
            request = UpdateRequest(paths, entry.version, stage=entry.banks == "ab")
            try:
                plan = await update.preflight(image, request)
            except (BmcError, ImageDigestMismatch) as exc:
                if isinstance(exc, BmcUnavailable):
                    raise
                raise Stop(S.FAILED, f"{name}: {exc}") from None
            plans[name] = ComponentPlan(
                version=entry.version,
                banks=entry.banks,
                targets=list(plan.pending),
                before=dict(plan.before),
                done=not plan.pending,
            )
    progress.components = plans
    if all(p.done for p in plans.values()) and progress.in_band is None:
        events: Events = [
            (
                DeviceOutcome.VERIFIED,
                DeviceVerified(
                    rollout_id=claim.rollout_id,
                    node_id=claim.node_id,
                    component=Component(name),
                    from_version=p.version,
                    to_version=p.version,
                    duration_s=0.0,
                ),
            )
            for name, p in plans.items()
        ]
        await ctx.commit(
            claim, S.DONE, "already at the target: nothing written", progress, events=events
        )
        return
    await ctx.commit(claim, S.STAGING, "", progress)
