"""The forward activation a node's BMC profile declares (``[activation]``), run by
``activating`` once the node is drained (issue 29 item 1; the flip back is ``rollback``'s).

- ``stage_and_activate`` (and an item begun without a profile): ``UpdateService.Activate`` of
  the staged images, as ``activating`` always did.
- ``OperationApplyTime`` ``Immediate`` without a reset: the push is the activation; every part
  not yet written is pushed now (``push``: recorded as sent first, never sent twice).
- a reset (``Chassis.Reset`` power cycle of a GB200 tray, ``ComputerSystem.Reset`` of
  ``Systems/*`` on HGX, ``Manager.Reset``): what waits for the drained node is pushed first,
  then ONE reset per node, under the fence and the guard with ``activate_sent`` recorded
  first; a reset answered with a Task is followed as the activation's task (DSP0266 "Tasks").

Item 6, asking the BMC before assuming the worst: ``activate_sent`` recorded and the send not
known to have returned (``activated_at`` unset: a worker died between the two) is resolved by
reading the targets. Where each still runs the version it ran before and shows the image
``Staged`` (waiting), and the BMC's TaskService shows no task running, nothing was activated:
the node ends ``cancelled`` (given back), not quarantined, once the BMC has shown that for the
time a reset takes to come back (``reachable_s``: a tray's power cycle sent just before the
worker died runs the images only when the tray is back). Where a target runs the new version,
the activation happened and the node goes on to be verified. A BMC that shows neither (no
``Staged``, a task running) cannot tell: the node goes on, and a version that did not move
quarantines it at verification, as before.
"""

from __future__ import annotations

from typing import Literal

from lockstep_common.events.v1 import DeviceActivated, FleetNode
from lockstep_common.vocabulary import DeviceOutcome
from lockstep_redfish.errors import BmcError, BmcUnavailable
from lockstep_redfish.profile import BmcProfile, ResetKind
from lockstep_redfish.update import FirmwareUpdate
from lockstep_updater.domain.guard import Verdict
from lockstep_updater.domain.progress import FirmwareProgress
from lockstep_updater.domain.steps import NodeStep
from lockstep_updater.steps.bmc_profile import update_policy
from lockstep_updater.steps.context import Events, StepContext
from lockstep_updater.steps.ends import NotYet, Stop, ending
from lockstep_updater.steps.push import push
from lockstep_updater.store import Claim, Target

S = NodeStep
TASKS = "/redfish/v1/TaskService/Tasks"
RUNNING = frozenset({"New", "Starting", "Running", "Pending", "Stopping", "Suspended"})


async def by_profile(
    ctx: StepContext,
    claim: Claim,
    node: FleetNode,
    target: Target,
    held: FirmwareProgress,
    profile: BmcProfile,
    started: float,
    *,
    resend: bool = False,
) -> Events:
    """Push what waits for the drained node, then the profile's one reset (module
    docstring); the ``device.activated`` events of the parts written in place here.
    ``resend``: the reset was recorded (``activate_sent``) and the BMC shows it never reached
    it (:func:`nothing_activated`): it is sent now, under the guard, not recorded again."""
    events: Events = []
    for name, plan in held.components.items():
        if plan.done or plan.staged:
            continue
        await push(ctx, claim, node, target, name, plan, held, stage=False)
        plan.staged = True
        if plan.banks != "ab":  # an A/B part's event comes with the others' (``activating``)
            event = ctx.device(DeviceActivated, claim, name, plan, started)
            events.append((DeviceOutcome.ACTIVATED, event))
    act = profile.activation
    if act.reset is ResetKind.NONE or (held.activate_sent and not resend):
        return events
    assert act.resource is not None and act.reset_type is not None  # noqa: S101 - validated
    mark: Literal["activate_sent"] | None = None if resend else "activate_sent"
    decision = await ctx.check(claim, node, takes_out=False, progress=held, mark=mark)
    if decision.verdict is not Verdict.PROCEED:
        held.ending = ending(decision)
        raise Stop(S.UNCORDONING, decision.reason)
    async with ctx.session(node, held) as bmc:
        update = FirmwareUpdate(bmc, update_policy(ctx, profile))
        try:
            refs = [
                await update.reset(path, act.reset_type)
                for path in await update.resources(act.resource)
            ]
        except BmcUnavailable:
            raise
        except BmcError as exc:
            raise Stop(S.QUARANTINED, f"activate: {exc}") from None
    # Followed in turns by ``activating``, as a staging task: recorded before the first poll.
    held.activations = [(r.monitor, r.task) for r in refs if r is not None]
    held.activated_at = ctx.wall()
    await ctx.save(claim, held)
    return events


async def resolve_uncertain(
    ctx: StepContext, claim: Claim, node: FleetNode, held: FirmwareProgress
) -> None:
    """``activate_sent`` recorded, the send not known to have returned: read the BMC
    (module docstring); :class:`Stop` ``cancelled`` where it shows nothing was activated."""
    if await nothing_activated(ctx, claim, node, held):
        raise Stop(
            S.CANCELLED,
            "the activation was recorded but never reached the BMC: it shows the image "
            "staged, the previous version running and no task; nothing was activated",
        )


async def nothing_activated(
    ctx: StepContext, claim: Claim, node: FleetNode, held: FirmwareProgress
) -> bool:
    """Whether the BMC shows that a recorded activation never reached it (module docstring:
    every target ``Staged`` at the version it ran before, no task, for ``reachable_s``;
    :class:`NotYet` while it may still be under way). False where a target moved or the BMC
    cannot tell: ``activated_at`` is set, and verification decides."""
    pending = {n: p for n, p in held.components.items() if not p.done and p.staged}
    async with ctx.session(node, held) as bmc:
        update = FirmwareUpdate(bmc, ctx.policy.update, expand=held.bmc_expand)
        members = {n: await update.members(tuple(p.targets)) for n, p in pending.items()}
        tasks = await _running_tasks(update)
    if tasks:
        await _wait_for_running(ctx, claim, held)
    moved = any(
        m.item.Version == pending[n].version for n, read in members.items() for m in read.values()
    )
    waiting = all(
        m.item.Staged is True and m.item.Version == pending[n].before.get(path)
        for n, read in members.items()
        for path, m in read.items()
    )
    if not moved and waiting and tasks == 0 and pending:
        # A reset sent just before the worker died may still be under way (a tray's power
        # cycle runs the images only once it is back): the BMC is asked again until it had
        # the time a reset takes to come back (``reachable_s``).
        now = ctx.wall()
        if held.unsure_since is None:
            held.unsure_since = now
            await ctx.save(claim, held)
        if now - held.unsure_since < ctx.policy.update.reachable_s:
            raise NotYet("activate: asking the BMC whether the recorded activation reached it")
        return True
    held.activated_at = ctx.wall()  # it can tell no more: verification decides
    await ctx.save(claim, held)
    return False


async def _wait_for_running(ctx: StepContext, claim: Claim, held: FirmwareProgress) -> None:
    """The activation reached the BMC and still runs (its sender died before recording its
    task): the node stays drained and nothing is verified beside it until the BMC's tasks end,
    for at most ``reachable_s``; then it is quarantined, drained. Found by the chaos test: the
    node was verified and given back while the BMC still ran the activation."""
    now = ctx.wall()
    if held.unsure_since is None:
        held.unsure_since = now
        await ctx.save(claim, held)
    limit = ctx.policy.update.reachable_s
    if now - held.unsure_since >= limit:
        raise Stop(
            S.QUARANTINED,
            f"activate: a task the BMC runs since the activation was recorded did not end "
            f"within {limit:g}s",
        )
    raise NotYet("activate: the BMC runs the recorded activation's task; waiting for it to end")


async def _running_tasks(update: FirmwareUpdate) -> int | None:
    """Tasks the BMC's TaskService shows not yet ended; None where it has none to read."""
    try:
        paths = await update.collection(TASKS)
        states = [(await update.bmc.request("GET", p)).body for p in paths]
    except BmcUnavailable:
        raise
    except BmcError:
        return None
    return sum(1 for doc in states if isinstance(doc, dict) and doc.get("TaskState") in RUNNING)
