"""One component's image push, sent at most once (staging, and one-way parts in activating).

Never twice: a push is recorded as ``sent`` (with the fence and the guard, in one transaction)
before it is sent. A later run that finds ``sent`` does not push; it follows the recorded task
or reads the members (``Staged``, ``Version``) and, when it cannot tell, stops the node with
the reason instead of sending again.
"""

from __future__ import annotations

from lockstep_common.events.v1 import FleetNode
from lockstep_redfish.errors import (
    BmcError,
    BmcUnavailable,
    ImageDigestMismatch,
    PushOutcomeUnknown,
)
from lockstep_redfish.models import UpdatableSoftware
from lockstep_redfish.preflight import Method, UpdateRequest
from lockstep_redfish.profile import BmcProfile, TargetsFrom
from lockstep_redfish.tasks import TaskRef
from lockstep_redfish.update import FirmwareUpdate
from lockstep_updater.domain.guard import Verdict
from lockstep_updater.domain.progress import ComponentPlan, FirmwareProgress, PushTask
from lockstep_updater.domain.steps import NodeStep
from lockstep_updater.steps import reflash
from lockstep_updater.steps.bmc_profile import profile_of, push_request, update_policy
from lockstep_updater.steps.context import StepContext
from lockstep_updater.steps.ends import NotYet, Stop, failure_end, stop_unless_proceed
from lockstep_updater.store import Claim, Target

S = NodeStep


async def push(
    ctx: StepContext,
    claim: Claim,
    node: FleetNode,
    target: Target,
    name: str,
    plan: ComponentPlan,
    progress: FirmwareProgress,
    *,
    stage: bool,
) -> None:
    """Push ``name``'s image (``stage``: to the inactive bank, the node still in service),
    or, where an earlier run recorded it as sent, follow what became of it."""
    profile = profile_of(progress)
    request = push_request(profile, plan.targets, plan.version, stage=stage)
    async with ctx.session(node, progress) as bmc:
        update = FirmwareUpdate(bmc, update_policy(ctx, profile), expand=progress.bmc_expand)
        if plan.sent:
            await _after_unknown_push(ctx, update, claim, name, plan, request)
            return
        _keep_gap(ctx, node, profile, progress, name)
        bundle, entry = await reflash.source(ctx, node, target, name, plan, progress)
        image = await ctx.image(bundle, entry)  # fetched and hashed, once, right before the push
        try:
            checked = await update.preflight(image, request)
        except BmcUnavailable:
            raise
        except (BmcError, ImageDigestMismatch) as exc:
            raise Stop(failure_end(claim), f"{name}: {exc}") from None
        if not checked.pending:
            plan.done = True  # the device runs it already: nothing to write
            return
        plan.sent = True
        decision = await ctx.check(claim, node, takes_out=not stage, progress=progress)
        if decision.verdict is not Verdict.PROCEED:
            plan.sent = False
        stop_unless_proceed(decision)
        ctx.sessions.pushed[node.bmc_url] = ctx.wall()  # the gap counts from the attempt
        related = profile is not None and profile.push.targets is TargetsFrom.RELATED
        try:
            ref = await update.push(
                image,
                request,
                checked,
                server=ctx.image_server,
                targets=await _targets(update, profile, checked.pending) if related else None,
                parameters=reflash.parameters(profile, progress),
            )
        except ImageDigestMismatch as exc:
            plan.sent = False  # checked right before sending: nothing left this host
            raise Stop(failure_end(claim), f"{name}: {exc}") from None
        except PushOutcomeUnknown as exc:
            raise Stop(failure_end(claim), f"{name}: {exc}; not sent again") from None
        except BmcUnavailable:
            plan.sent = False  # the BMC cannot have taken it (transport.NOT_TAKEN)
            await ctx.save(claim, progress)
            raise
        except BmcError as exc:
            raise Stop(failure_end(claim), f"{name}: {exc}") from None
        plan.task = PushTask(monitor=ref.monitor, task=ref.task, since=ctx.wall())
        await ctx.save(claim, progress)
        if checked.method in (Method.MULTIPART, Method.HTTP_PUSH):
            # The image went with the request: the task can be followed in turns.
            await _follow(ctx, update, claim, name, plan)
            return
        try:  # the BMC pulls the image while its task runs: it stays offered until then
            await _wait(update, claim, name, ref)
        finally:
            if ctx.image_server is not None:
                ctx.image_server.withdraw(image)


async def _targets(
    update: FirmwareUpdate, profile: BmcProfile | None, pending: tuple[str, ...]
) -> list[str]:
    """``Targets`` naming the devices the profile's BMC takes (``push.related``)."""
    return await update.related_targets(pending, profile.push.related if profile else ())


def _keep_gap(
    ctx: StepContext,
    node: FleetNode,
    profile: BmcProfile | None,
    progress: FirmwareProgress,
    name: str,
) -> None:
    """:class:`NotYet` until the profile's ``min_gap_s`` has passed since the last push to
    this BMC (NVIDIA nvfwupd ``UPDATE_DELAY``: pushes back to back exhaust a BMC's memory):
    the item's own pushes (recorded, so a restart keeps them) and any other item's from this
    process (a flip-back or a remedy right after an update, ``NodeSessions.pushed``)."""
    gap = 0.0 if profile is None else profile.push.min_gap_s
    gap = gap if ctx.policy.push_gap_s is None else ctx.policy.push_gap_s
    sent = [p.task.since for p in progress.components.values() if p.task and p.task.since]
    if (other := ctx.sessions.pushed.get(node.bmc_url)) is not None:
        sent.append(other)
    left = gap - (ctx.wall() - max(sent)) if sent and gap else 0.0
    if left > 0:
        raise NotYet(f"{name}: {left:.0f}s more between pushes to this BMC (its profile's gap)")


async def _follow(
    ctx: StepContext, update: FirmwareUpdate, claim: Claim, name: str, plan: ComponentPlan
) -> None:
    """One turn of following the push's recorded task; :class:`NotYet` while it
    runs after ``task_hold_s`` (the deadline counts from the push: ``since``)."""
    task = plan.task
    assert task is not None  # noqa: S101 - followed only once recorded
    ref = TaskRef(task.monitor, task.task)
    now = ctx.wall()
    waited = max(0.0, now - (now if task.since is None else task.since))
    try:
        outcome = await update.follow(ref, hold_s=ctx.policy.task_hold_s, waited_s=waited)
    except BmcUnavailable:
        raise  # TaskUnreachable: accepted; the next run follows the recorded task
    except BmcError as exc:
        raise Stop(failure_end(claim), f"{name}: {exc}") from None
    if outcome is None:
        raise NotYet(f"{name}: the BMC's task is still running")


async def _after_unknown_push(
    ctx: StepContext,
    update: FirmwareUpdate,
    claim: Claim,
    name: str,
    plan: ComponentPlan,
    request: UpdateRequest,
) -> None:
    """A push recorded as sent by an earlier run: follow its task, or read the members;
    never send it again."""
    if plan.task is not None:
        await _follow(ctx, update, claim, name, plan)
    # Without a recorded task, the members tell: the image shows as staged (or running)
    # once the BMC's task ends, so they are read until then (at most ``settle_s``).
    started = update.clock()
    while True:
        members = await update.members(request.targets)
        if all(_holds(m.item, request) for m in members.values()):
            return
        if update.clock() - started >= ctx.policy.update.settle_s:
            break
        await update.sleep(ctx.policy.update.read_poll_s)
    raise Stop(
        S.FAILED,
        f"{name}: a push may have been accepted but the members show "
        "no staged image; not sent again",
    )


async def _wait(update: FirmwareUpdate, claim: Claim, name: str, ref: TaskRef) -> None:
    try:
        await update.wait(ref)
    except BmcUnavailable:
        raise  # TaskUnreachable: accepted; the next run follows the recorded task
    except BmcError as exc:
        raise Stop(failure_end(claim), f"{name}: {exc}") from None


def _holds(item: UpdatableSoftware, request: UpdateRequest) -> bool:
    """The member holds the pushed image: staged, or already running it."""
    return bool(item.Staged) or item.Version == request.version
