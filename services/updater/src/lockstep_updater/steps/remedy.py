"""``preflight`` of the GSP / driver runbook (kind ``remedy``, seed 004): read the node through
its agent; aligned already means nothing to do; Secure Boot refusing the module is not this
runbook; otherwise the pinned branch (the drift's pin, else the installed driver package) and
the previous known-good branch, each with the digest of the latest bundle attesting its package
(no bundle attesting the pin: failed, nothing touched), then to cordoning (nothing to stage)."""

from __future__ import annotations

from lockstep_common.events.v1 import FleetNode
from lockstep_common.vocabulary import Component
from lockstep_updater.domain.inband import fallback_for
from lockstep_updater.domain.progress import Progress, RemedyProgress
from lockstep_updater.domain.steps import NodeStep
from lockstep_updater.steps.context import StepContext
from lockstep_updater.steps.in_band import attested_digest, order, require_agent, unit
from lockstep_updater.steps.in_band_endings import failed_events, secure_boot_reason
from lockstep_updater.store import Claim

S = NodeStep


async def run(
    ctx: StepContext, claim: Claim, node: FleetNode, progress: Progress, started: float
) -> None:
    assert isinstance(progress, RemedyProgress)  # noqa: S101 - STEPS runs it for remedies
    state = await require_agent(ctx).state(order(claim, node))
    progress.pool = node.pool
    pin = progress.pin or state.driver
    if state.module_rejected:
        reason = secure_boot_reason()
        events = failed_events(claim, pin, state, "preflight", reason)
        await ctx.commit(claim, S.FAILED, reason, progress, events=events)
        return
    if state.runs(pin):
        await ctx.commit(
            claim,
            S.DONE,
            f"{pin}: module and GSP firmware agree, diag passes: nothing written",
            progress,
        )
        return
    if progress.in_band is None:
        fallback = fallback_for(state, pin)
        work = unit(pin, fallback, {Component.DRIVER.value: pin}, state)
        work.package_sha256 = await attested_digest(ctx, node, pin)
        if work.package_sha256 is None:
            reason = (
                f"no attested bundle names driver {pin} for profile {node.profile}: the agent "
                "installs only attested packages; nothing touched"
            )
            await ctx.commit(claim, S.FAILED, reason, progress)
            return
        work.fallback_sha256 = await attested_digest(ctx, node, fallback)
        progress.in_band = work
    await ctx.commit(claim, S.CORDONING, f"runbook: reinstall {pin} as one unit", progress)
