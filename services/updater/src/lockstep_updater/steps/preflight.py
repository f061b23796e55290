"""``preflight`` of a rollout's update: the guard and the maintenance windows, the attested
bundle, the node's BMC profile and what it refuses (``bmc_profile``: the account's privilege,
the login, unmapped components, the push method, the image size, a downgrade), and per
component the members to write (the profile's member map) and the versions they run; a node
already at the target ends ``done`` without a write. Nothing is cordoned before it passes."""

from __future__ import annotations

from lockstep_common.events.v1 import DeviceVerified, FleetNode
from lockstep_common.vocabulary import Component, DeviceOutcome
from lockstep_redfish.errors import BmcError, BmcUnavailable, ImageDigestMismatch
from lockstep_redfish.preflight import Intent
from lockstep_redfish.update import FirmwareUpdate, policy_for
from lockstep_updater.adapters.member_devices import member_pci_ids
from lockstep_updater.domain.guard import Verdict
from lockstep_updater.domain.progress import ComponentPlan, Progress, UpdateProgress
from lockstep_updater.domain.steps import NodeStep
from lockstep_updater.domain.targets import applicable_members
from lockstep_updater.steps import bmc_profile, in_band
from lockstep_updater.steps.bmc_profile import push_request
from lockstep_updater.steps.context import Events, StepContext
from lockstep_updater.steps.ends import Stop, stop_unless_proceed
from lockstep_updater.steps.plans import entry_for
from lockstep_updater.store import Claim, Target

S = NodeStep
LEADS_TO = frozenset({S.PREFLIGHT, S.STAGING, S.CORDONING, S.DONE, S.CANCELLED, S.FAILED})
"""Where a preflight of any kind goes (a remedy's straight to cordoning: nothing to stage)."""


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
    bmc_side = [name for name in claim.components if name not in agent_side]
    if bmc_side:  # nothing goes through the BMC otherwise: no profile to choose
        plans = await _plan_bmc(ctx, node, target, progress, bmc_side)
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


async def _plan_bmc(
    ctx: StepContext,
    node: FleetNode,
    target: Target,
    progress: UpdateProgress,
    names: list[str],
) -> dict[str, ComponentPlan]:
    """The BMC's profile chosen (refused with one line where it must not be flashed), then
    per component the members to write and the versions they run (read, nothing written)."""
    plans: dict[str, ComponentPlan] = {}
    entries = {name: entry_for(target, node, name) for name in names}
    intents = [Intent(Component(n), e.version, e.size) for n, e in entries.items()]
    chosen = await bmc_profile.choose(ctx, node, progress, intents)
    async with ctx.session(node, progress) as bmc:
        policy = policy_for(chosen.profile, ctx.policy.update)
        update = FirmwareUpdate(bmc, policy, expand=progress.bmc_expand)
        for name, entry in entries.items():
            paths = chosen.member_paths(Component(name))
            image = await ctx.image(target, entry)
            # Only the members whose device the package declares (domain.targets).
            related = chosen.related(paths)  # the members' links, read by choose just now
            paths = applicable_members(image.data, await member_pci_ids(bmc, paths, related))
            if not paths:
                raise Stop(S.FAILED, f"{name}: the image applies to none of its members")
            chosen.refuse_downgrade(Intent(Component(name), entry.version), paths)
            request = push_request(chosen.profile, paths, entry.version, stage=entry.banks == "ab")
            try:
                plan = await update.preflight(image, request, read=chosen.facts)
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
    return plans
