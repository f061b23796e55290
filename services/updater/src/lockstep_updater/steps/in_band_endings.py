"""How the in-band step ends (``steps.in_band``): verified, back on the previous known-good
branch, or quarantined and escalated; with the ``device.*`` events each end carries."""

from __future__ import annotations

from lockstep_common.events.v1 import DeviceFailed, DeviceRolledBack, DeviceVerified
from lockstep_common.vocabulary import Component, DeviceOutcome, RollbackMechanism, clip_text
from lockstep_updater.domain.inband import AgentState
from lockstep_updater.domain.progress import InBandProgress, InBandUnit
from lockstep_updater.domain.steps import NodeStep
from lockstep_updater.steps.context import Events, StepContext
from lockstep_updater.store import REMEDY, Claim

S = NodeStep


async def verified(
    ctx: StepContext,
    claim: Claim,
    progress: InBandProgress,
    work: InBandUnit,
    state: AgentState,
    took_s: float,
) -> None:
    """The unit came up clean (the target, or the previous known-good branch): given back."""
    duration = round(max(0.0, took_s), 3)
    events: Events = []
    read = state.versions()
    if work.attempt == "fallback":
        # Back on the previous known-good branch (seed 004 "Rollback"): in service again,
        # but the change did not happen.
        assert work.fallback is not None  # noqa: S101 - the fallback attempt exists only with one
        rolled = DeviceRolledBack(
            rollout_id=claim.rollout_id,
            node_id=claim.node_id,
            component=Component.DRIVER,
            from_version=work.version,
            to_version=work.fallback,
            duration_s=duration,
            reason=clip_text("; ".join(work.failures)),
            mechanism=RollbackMechanism.IN_BAND_FALLBACK,
        )
        events.append((DeviceOutcome.ROLLED_BACK, rolled))
        reason = (
            f"{work.version} did not come up clean; back on the previous known-good "
            f"branch {work.fallback} (pin the node to it and fix the upgrade path)"
        )
        # A runbook that restored a clean node did its job; a rollout's node did not move.
        progress.ending = S.DONE if claim.kind == REMEDY else S.FAILED
        progress.ending_reason = reason
        await ctx.commit(claim, S.UNCORDONING, reason, progress, events=events)
        return
    for name, wanted in work.components.items():
        done = DeviceVerified(
            rollout_id=claim.rollout_id,
            node_id=claim.node_id,
            component=Component(name),
            from_version=work.before.get(name),
            to_version=read.get(name) or wanted,
            duration_s=duration,
        )
        events.append((DeviceOutcome.VERIFIED, done))
    progress.ending = S.DONE
    reason = f"{work.version}: module and GSP firmware agree, diag passes"
    if claim.kind == REMEDY:
        progress.ending_reason = reason
    await ctx.commit(claim, S.UNCORDONING, reason, progress, events=events)


async def quarantine(
    ctx: StepContext,
    claim: Claim,
    progress: InBandProgress,
    work: InBandUnit,
    state: AgentState,
    reason: str,
) -> None:
    events = failed_events(claim, work.version, state, S.IN_BAND.value, reason, work)
    await ctx.commit(claim, S.QUARANTINED, reason, progress, events=events)


def secure_boot_reason() -> str:
    return (
        "Secure Boot rejected the nvidia module (module verification failed): not a GSP "
        "mismatch (seed 004 'Not this runbook'); sign the module or enroll a MOK; not retried"
    )


def failed_events(
    claim: Claim,
    version: str,
    state: AgentState,
    step: str,
    reason: str,
    work: InBandUnit | None = None,
) -> Events:
    """A ``device.failed`` for each of the unit's components (the driver, without a unit)."""
    components = (work.components if work else None) or {Component.DRIVER.value: version}
    before = work.before if work else {}
    read = state.versions()
    return [
        (
            DeviceOutcome.FAILED,
            DeviceFailed(
                rollout_id=claim.rollout_id,
                node_id=claim.node_id,
                component=Component(name),
                from_version=before.get(name) or read.get(name),
                to_version=wanted,
                step=step,
                reason=clip_text(reason),
            ),
        )
        for name, wanted in components.items()
    ]
