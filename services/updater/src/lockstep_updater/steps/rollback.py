"""``preflight`` of a flip back after a tripped gate (kind ``rollback``): once the node's update
has ended, which of its A/B images did it activate, does the BMC show them running, and how can
this BMC run the previous ones again? Then the usual steps from cordoning on (drain, run the
previous images, wait for the BMC, read back, give the node back), the activation's write being
:func:`send_flip_back` (docs/updater.md "Flip-back").

Asked before anything is written or drained:

- nothing activated, or the BMC reads every activated member at its previous version already (a
  worker died between recording the activation and sending it): nothing to flip back, the item
  ends ``cancelled`` with no write (issue 29, item 6);
- the BMC's profile (the one the update chose, ``bmc_profile``, else the one its answers select)
  says how (``lockstep_redfish.flip_back.mechanism_for``): ``inactive_image`` runs the image the
  BMC keeps in its other bank (each found first: a BMC that lacks one fails the item before the
  drain, ``lockstep_redfish.flip_back.find_inactive``); ``reflash`` (one-way) writes the
  previous attested image again, a downgrade by the profile's own push and activation (forced,
  or an ordinary update where the standard has no force flag: ``[downgrade] mode``), only
  where the profile allows one, the approved plan says so and an attested bundle holds that
  image (``steps.reflash``): otherwise the item fails with that one line, the node never
  drained.
"""

from __future__ import annotations

from lockstep_common.events.v1 import FleetNode
from lockstep_common.vocabulary import Component, RollbackMechanism
from lockstep_redfish.errors import BmcError, BmcUnavailable, UpdateRefused
from lockstep_redfish.flip_back import (
    find_inactive,
    keeps_previous_image,
    mechanism_for,
    profile_of,
    run_inactive,
)
from lockstep_redfish.profile import BmcProfile, profile_named
from lockstep_redfish.tasks import TaskRef
from lockstep_redfish.update import FirmwareUpdate
from lockstep_updater.domain.progress import (
    ComponentPlan,
    FirmwareProgress,
    Progress,
    RollbackProgress,
    UpdateProgress,
)
from lockstep_updater.domain.steps import TERMINAL, NodeStep
from lockstep_updater.steps import reflash
from lockstep_updater.steps.bmc_profile import refuse_unprivileged_flip_back
from lockstep_updater.steps.context import StepContext
from lockstep_updater.steps.ends import Stop
from lockstep_updater.store import Claim

S = NodeStep


async def run(
    ctx: StepContext, claim: Claim, node: FleetNode, progress: Progress, started: float
) -> None:
    assert isinstance(progress, RollbackProgress)  # noqa: S101 - STEPS runs it for rollbacks
    update = await ctx.update_item(claim)
    if update is not None and update[0] not in TERMINAL:
        await ctx.commit(
            claim, S.PREFLIGHT, "waiting for the update to end", progress, ctx.policy.retry_s
        )
        return
    done = UpdateProgress() if update is None else update[1]
    assert isinstance(done, UpdateProgress)  # noqa: S101 - the model of an update item
    activated = {
        name: plan
        for name, plan in done.components.items()
        if done.activate_sent and plan.banks == "ab" and plan.staged
    }
    if not activated:
        await ctx.commit(
            claim, S.CANCELLED, "nothing was activated: nothing to flip back", progress
        )
        return
    progress.components = {}
    for name, plan in activated.items():
        previous = [v for v in plan.before.values() if v]
        if not previous:
            raise Stop(S.FAILED, f"{name}: the version before the update is unknown")
        progress.components[name] = ComponentPlan(
            version=previous[0],
            banks="ab",
            targets=plan.targets,
            before=dict.fromkeys(plan.targets, plan.version),
            staged=True,  # the previous image waits in the other bank
        )
    # Logged in as the update was (a BMC offering only HTTP Basic over verified TLS, say).
    progress.bmc_login = done.bmc_login
    async with ctx.session(node, progress) as bmc:
        update_ = FirmwareUpdate(bmc, ctx.policy.update)
        try:
            running = await _still_new(update_, progress.components)
            if not running:
                await ctx.commit(
                    claim,
                    S.CANCELLED,
                    "the BMC reads every activated device at its previous version: "
                    "nothing was activated, nothing to flip back",
                    progress,
                )
                return
            progress.components = running
            profile = profile_named(done.bmc_profile) if done.bmc_profile else await profile_of(bmc)
            progress.bmc_profile = profile.id
            progress.mechanism = await _mechanism(update_, profile, running)
            if progress.mechanism is RollbackMechanism.INACTIVE_IMAGE:  # DSP8011 privileges
                before = {t: p.version for p in running.values() for t in p.targets}
                await refuse_unprivileged_flip_back(ctx, node, update_, profile, before)
            if progress.mechanism is RollbackMechanism.REFLASH:
                refused = await reflash.refusal(ctx, claim, node, profile, running)
                if refused is not None:
                    raise Stop(S.FAILED, refused)
                for plan in running.values():
                    plan.staged = False  # the previous image is written again: pushed first
        except BmcUnavailable:
            raise
        except BmcError as exc:
            raise Stop(S.FAILED, f"flip back: {exc}") from None
    progress.rollback = True
    # Through staging (a re-flash pushes there as an update does; else nothing to push: every
    # image is in place) to cordoning.
    await ctx.commit(claim, S.STAGING, f"flip back ({progress.mechanism})", progress)


async def _still_new(
    update: FirmwareUpdate, plans: dict[str, ComponentPlan]
) -> dict[str, ComponentPlan]:
    """The plans with a member the BMC does not read at the previous version (GETs only)."""
    out = {}
    for name, plan in plans.items():
        members = await update.members(tuple(plan.targets))
        if any(m.item.Version != plan.version for m in members.values()):
            out[name] = plan
    return out


async def _mechanism(
    update: FirmwareUpdate, profile: BmcProfile, plans: dict[str, ComponentPlan]
) -> RollbackMechanism:
    mechanism = mechanism_for(profile)
    if not all(keeps_previous_image(profile, Component(name)) for name in plans):
        # A component the bank does not keep (a GPU behind a Supermicro BMC): the whole item is
        # a re-flash, as the planner ordered it (``keeps_previous_image``), not a search for a
        # backup image that is not there.
        mechanism = RollbackMechanism.REFLASH
    if mechanism is RollbackMechanism.INACTIVE_IMAGE:
        for plan in plans.values():  # each previous image is there, or nothing is drained
            for target in plan.targets:
                await find_inactive(update, profile, target, plan.version)
    return mechanism


def resends_flip_back(progress: FirmwareProgress) -> bool:
    """Whether a flip-back whose write was recorded as sent but never known to be (the worker
    died in between, issue 29 item 6) is sent again: only where its mechanism lets the BMC tell
    (``inactive_image``: ``run_inactive`` reads before it writes, so it sends only what is
    missing); elsewhere the read-back decides."""
    return (
        isinstance(progress, RollbackProgress)
        and progress.mechanism is RollbackMechanism.INACTIVE_IMAGE
    )


async def send_flip_back(
    update: FirmwareUpdate, progress: FirmwareProgress, paths: tuple[str, ...]
) -> list[TaskRef]:
    """Run the previous images on ``paths`` as the flip back's preflight chose (the write of
    ``activating``'s flip-back branch, sent once: ``activate_sent`` is recorded first)."""
    mechanism = progress.mechanism if isinstance(progress, RollbackProgress) else None
    if mechanism is RollbackMechanism.INACTIVE_IMAGE and progress.bmc_profile:
        previous = {t: p.version for p in progress.components.values() for t in p.targets}
        wanted = {t: previous[t] for t in paths}
        return await run_inactive(update, profile_named(progress.bmc_profile), wanted)
    # A re-flash is written by ``push`` and run by the profile's activation (``activating``).
    raise UpdateRefused(f"a flip-back by {mechanism} has no bank to switch")
