"""``activating``: switch the staged images in (activate as the node's BMC profile says,
``steps.activation``, or for a flip back run the inactive bank; a flip back that re-flashes
the previous images is activated as an update is, ``steps.reflash``), under the fence and the
guard with ``activate_sent`` recorded first; the activation's tasks are followed in turns. An
update's activation recorded but not known to have been sent is resolved by reading the BMC
(issue 29 item 6). One-way parts have no inactive bank: their write is the activation, so it
waits for the drained node (seed 000: PSU/BBU power firmware)."""

from __future__ import annotations

from typing import Literal

from lockstep_common.events.v1 import DeviceActivated, FleetNode
from lockstep_common.vocabulary import DeviceOutcome
from lockstep_redfish.errors import BmcError, BmcUnavailable
from lockstep_redfish.tasks import TaskRef
from lockstep_redfish.update import FirmwareUpdate
from lockstep_updater.domain.guard import Verdict
from lockstep_updater.domain.progress import FirmwareProgress, Progress, RollbackProgress, firmware
from lockstep_updater.domain.steps import NodeStep
from lockstep_updater.steps import activation
from lockstep_updater.steps.bmc_profile import profile_of, update_policy
from lockstep_updater.steps.context import Events, StepContext
from lockstep_updater.steps.ends import NotYet, Stop, ending
from lockstep_updater.steps.push import push
from lockstep_updater.steps.reflash import is_reflash
from lockstep_updater.steps.rollback import resends_flip_back, send_flip_back
from lockstep_updater.store import Claim

S = NodeStep
LEADS_TO = frozenset({S.ACTIVATING, S.AWAITING_BMC, S.UNCORDONING, S.QUARANTINED})


async def run(
    ctx: StepContext, claim: Claim, node: FleetNode, progress: Progress, started: float
) -> None:
    held = firmware(progress)
    flip_back = isinstance(held, RollbackProgress) and held.rollback
    rollback = flip_back and not is_reflash(held)  # runs the bank the BMC kept
    events: Events = []
    target = await ctx.target(claim)
    if target is None:
        raise Stop(S.QUARANTINED, "the plan's attested bundle is no longer known")
    plans = held.components
    staged = [n for n, p in plans.items() if not p.done and p.banks == "ab"]
    profile = None if rollback else profile_of(held)
    resend = False
    if not rollback and held.activate_sent and held.activated_at is None:
        # Item 6: ask the BMC. An update it shows never activated is given back (cancelled);
        # a re-flash it shows never activated still runs the image that tripped the gate, so
        # its activation is sent now, once, under the guard. A BMC that cannot tell: the
        # read-back decides (a version that did not move: quarantined).
        if not flip_back:
            await activation.resolve_uncertain(ctx, claim, node, held)
        else:
            resend = await activation.nothing_activated(ctx, claim, node, held)
    if profile is not None and not profile.activation.stage_and_activate:
        events += await activation.by_profile(
            ctx, claim, node, target, held, profile, started, resend=resend
        )
    elif staged and (resend or not held.activate_sent):
        paths = tuple(t for n in staged for t in plans[n].targets)
        mark: Literal["activate_sent"] | None = None if resend else "activate_sent"
        await _send_staged(ctx, claim, node, held, paths, rollback=rollback, mark=mark)
    elif rollback and held.activate_sent and held.activated_at is None and resends_flip_back(held):
        # Recorded, never known sent: sent again under the guard, the BMC read before it writes.
        paths = tuple(t for p in plans.values() if not p.done for t in p.targets)
        await _send_staged(ctx, claim, node, held, paths, rollback=True, mark=None)
    if held.activations:
        await _follow_activations(ctx, claim, node, held)
    events += [
        (DeviceOutcome.ACTIVATED, ctx.device(DeviceActivated, claim, n, plans[n], started))
        for n in staged
        if not flip_back  # its outcome is device.rolled_back, once read back
    ]
    for name, plan in plans.items():
        if plan.done or plan.banks == "ab" or plan.staged:
            continue
        await push(ctx, claim, node, target, name, plan, held, stage=False)
        plan.staged = True
        events.append(
            (DeviceOutcome.ACTIVATED, ctx.device(DeviceActivated, claim, name, plan, started))
        )
    await ctx.commit(claim, S.AWAITING_BMC, "", held, events=events)


async def _send_staged(
    ctx: StepContext,
    claim: Claim,
    node: FleetNode,
    held: FirmwareProgress,
    paths: tuple[str, ...],
    *,
    rollback: bool,
    mark: Literal["activate_sent"] | None = "activate_sent",
) -> None:
    """Switch the staged images in (activate, or the flip-back's mechanism) under the guard,
    with ``activate_sent`` recorded first (``mark``; None: already recorded, a resend); the
    answer's tasks are recorded to follow."""
    decision = await ctx.check(claim, node, takes_out=False, progress=held, mark=mark)
    if decision.verdict is not Verdict.PROCEED:
        held.ending = ending(decision)
        raise Stop(S.UNCORDONING, decision.reason)
    async with ctx.session(node, held) as bmc:
        update = FirmwareUpdate(bmc, ctx.policy.update, expand=held.bmc_expand)
        try:
            if rollback:
                refs = await send_flip_back(update, held, paths)
            else:
                refs = await update.activate(paths)
        except BmcUnavailable:
            raise
        except BmcError as exc:
            raise Stop(S.QUARANTINED, f"activate: {exc}") from None
        # Followed in turns, as a staging task: recorded before the first poll.
        held.activations = [(r.monitor, r.task) for r in refs]
        held.activated_at = ctx.wall()
        await ctx.save(claim, held)


async def _follow_activations(
    ctx: StepContext, claim: Claim, node: FleetNode, progress: FirmwareProgress
) -> None:
    """One turn of following the activation's recorded tasks; each that ended is struck
    off; :class:`NotYet` while one still runs (the deadline counts from the activation)."""
    now = ctx.wall()
    since = now if progress.activated_at is None else progress.activated_at
    async with ctx.session(node, progress) as bmc:
        update = FirmwareUpdate(bmc, update_policy(ctx, profile_of(progress)))
        while progress.activations:
            monitor, task = progress.activations[0]
            waited = max(0.0, ctx.wall() - since)
            try:
                outcome = await update.follow(
                    TaskRef(monitor, task), hold_s=ctx.policy.task_hold_s, waited_s=waited
                )
            except BmcUnavailable:
                raise
            except BmcError as exc:
                raise Stop(S.QUARANTINED, f"activate: {exc}") from None
            if outcome is None:
                raise NotYet("activate: the BMC's task is still running")
            progress.activations.pop(0)
            if progress.activations:  # the last is committed with the step's end
                await ctx.save(claim, progress)
