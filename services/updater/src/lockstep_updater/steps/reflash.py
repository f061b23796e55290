"""The one-way flip-back (mechanism ``reflash``): the previous attested image of each activated
component written again by the profile's own push, the downgrade forced as the profile declares
or sent as an ordinary update where the standard has no force flag
(``lockstep_redfish.flip_back.downgrade_parameters``), then run by the profile's own activation
(``steps.activation``) and read back at the previous version (docs/updater.md "Flip-back").

What the flip-back's preflight asks before anything is written or drained (:func:`refusal`),
each a one-line ``failed`` ending:

- the profile allows no downgrade (``[downgrade] mode = "refused"``: Supermicro, whose capture
  advertises no way to force one);
- the profile forces downgrades only under a signed rollback approval
  (``needs_signed_approval``) and the rollout's approved plan does not say that a tripped gate
  re-flashes the component (``wave.planned`` ``reflash``, from the plan an approver signed:
  the plan hash covers it, ``lockstep_planner.domain.plan_hash``);
- no attested bundle holds the previous version's image for the node's hardware profile (the
  updater records every ``bundle.attested``).

The pushes go through ``steps.push`` as the forward path's do: recorded as sent before they are
sent (at most one accepted push per node and version), the image re-hashed against the attested
SHA-384 right before it leaves (``StepContext.image``).
"""

from __future__ import annotations

from typing import Any

from lockstep_common.events.v1 import AttestedComponent, FleetNode
from lockstep_common.vocabulary import Component, RollbackMechanism
from lockstep_redfish.errors import UpdateRefused
from lockstep_redfish.flip_back import downgrade_parameters
from lockstep_redfish.profile import BmcProfile, DowngradeMode
from lockstep_updater.domain.progress import ComponentPlan, FirmwareProgress, RollbackProgress
from lockstep_updater.domain.steps import NodeStep
from lockstep_updater.steps.context import StepContext
from lockstep_updater.steps.ends import Stop
from lockstep_updater.steps.plans import entry_for
from lockstep_updater.store import Claim, Target

S = NodeStep


def is_reflash(progress: FirmwareProgress) -> bool:
    """Whether ``progress`` is a flip-back that re-flashes the previous images."""
    return (
        isinstance(progress, RollbackProgress)
        and progress.rollback
        and progress.mechanism is RollbackMechanism.REFLASH
    )


async def refusal(
    ctx: StepContext,
    claim: Claim,
    node: FleetNode,
    profile: BmcProfile,
    plans: dict[str, ComponentPlan],
) -> str | None:
    """Why the re-flash of ``plans`` (component -> its previous version) must not run on this
    node (module docstring), one line; None when nothing stands in the way. Reads only."""
    versions = ", ".join(f"{n} {p.version}" for n, p in plans.items())
    head = (
        f"one-way: profile {profile.id} keeps no previous image to run; flipping back is a "
        f"re-flash of the previous attested image ({versions})"
    )
    try:
        downgrade_parameters(profile)
    except UpdateRefused as exc:
        return f"{head}, a downgrade: {exc}; re-flash by hand"
    forced = profile.downgrade.mode is DowngradeMode.FORCED
    if profile.downgrade.needs_signed_approval:
        approved = await ctx.approved_reflash(claim)
        missing = [n for n in plans if n not in approved]
        if missing:
            return (
                f"{head}, {'a forced' if forced else 'a'} downgrade the approved plan of "
                f"{claim.rollout_id} does not "
                f"say for {', '.join(missing)}: re-flash by hand, or plan with "
                "LOCKSTEP_PLANNER_BMC_PROFILES naming this BMC's profile"
            )
    for name, plan in plans.items():
        if await ctx.attested(node, Component(name), plan.version) is None:
            return (
                f"{head}: no attested bundle holds {name} {plan.version} for profile "
                f"{node.profile}; nothing was changed"
            )
    return None


async def source(
    ctx: StepContext,
    node: FleetNode,
    target: Target,
    name: str,
    plan: ComponentPlan,
    progress: FirmwareProgress,
) -> tuple[Target, AttestedComponent]:
    """Where ``name``'s image comes from: the rollout's bundle, or for a re-flash the latest
    attested bundle holding the previous version (``plan.version``) for the node's profile."""
    if not is_reflash(progress):
        return target, entry_for(target, node, name)
    found = await ctx.attested(node, Component(name), plan.version)
    if found is None:
        raise Stop(
            S.FAILED, f"{name}: no attested bundle holds {plan.version} for profile {node.profile}"
        )
    return found


def parameters(profile: BmcProfile | None, progress: FirmwareProgress) -> dict[str, Any] | None:
    """The push's fixed ``UpdateParameters``: the profile's, and for a re-flash what its
    ``[downgrade] mode`` sends a downgrade with (the forcing parameter; none where an older
    image is an ordinary update); its preflight checked the profile allows one."""
    fixed = None if profile is None else dict(profile.push.parameters)
    if profile is None or not is_reflash(progress):
        return fixed
    try:
        return {**(fixed or {}), **downgrade_parameters(profile)}
    except UpdateRefused as exc:
        raise Stop(S.FAILED, f"flip back: {exc}") from None
