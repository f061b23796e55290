"""``in_band``: the driver package unit through the node agent, for a rollout's in-band
components (issue 12 item 2) and for the GSP / driver runbook (item 5, seed 004), whose whole
repair it is.

Each run reads the agent first and makes the one call ``domain.inband.next_call`` names; the
fence and the guard are checked, and the call recorded as sent, in one transaction right before
it is made (as for a push or an activation), so a re-run never sends it again: it reads what the
node shows instead. A unit that does not come up clean is tried once on the previous known-good
branch (seed 004 "Rollback"); failing both, the node is quarantined and escalated as hardware
("GPU fault / RMA"). Secure Boot refusing the module is not this runbook: the node is
quarantined with that reason and nothing is retried.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from lockstep_common.events.v1 import AttestedComponent, FleetNode
from lockstep_common.vocabulary import Component, clip_text
from lockstep_updater.domain.guard import Verdict
from lockstep_updater.domain.inband import IN_BAND, AgentState, Call, fallback_for, next_call
from lockstep_updater.domain.progress import InBandProgress, InBandUnit, Progress
from lockstep_updater.domain.progress import in_band as in_band_of
from lockstep_updater.domain.steps import NodeStep
from lockstep_updater.ports import (
    AgentOrder,
    AgentOutcomeUnknown,
    AgentRefused,
    AgentUnavailable,
    NodeAgent,
)
from lockstep_updater.steps.context import StepContext
from lockstep_updater.steps.in_band_endings import quarantine, verified
from lockstep_updater.steps.lease_fence import fence_write
from lockstep_updater.store import Claim, Target

S = NodeStep
LEADS_TO = frozenset({S.IN_BAND, S.UNCORDONING, S.QUARANTINED})
ESCALATION = "escalated as hardware (seed 004: GPU fault / RMA path)"


def names(components: Sequence[str]) -> list[str]:
    """The work item's components installed through the agent."""
    return [c for c in components if Component(c) in IN_BAND]


def require_agent(ctx: StepContext) -> NodeAgent:
    if ctx.in_band.agent is None:
        raise AgentRefused(
            "no node agent channel is configured (LOCKSTEP_UPDATER_AGENT_CHANNEL=nats)"
        )
    return ctx.in_band.agent


def order(claim: Claim, node: FleetNode, work: InBandUnit | None = None) -> AgentOrder:
    """What every call to ``node``'s agent carries: the work item and its fencing token, and
    the attested package's SHA-256 of the attempt's branch (None where no bundle attests it:
    the agent installs nothing without one)."""
    attempt = work.attempt if work is not None else "read"
    digest = None
    if work is not None:
        digest = work.package_sha256 if attempt == "target" else work.fallback_sha256
    return AgentOrder(
        site=node.site,
        node_id=claim.node_id,
        work_item=str(claim.id),
        fencing_token=claim.token,
        attempt=attempt,
        package_sha256=digest,
    )


async def package_digest(ctx: StepContext, target: Target, entry: AttestedComponent) -> str:
    """The SHA-256 the agent checks the bytes it downloads against (it hashes with SHA-256):
    the attested package read from its bundle and re-hashed against the manifest's SHA-384
    first (``StepContext.image``: a mismatch fails closed)."""
    return hashlib.sha256((await ctx.image(target, entry)).data).hexdigest()


async def attested_digest(ctx: StepContext, node: FleetNode, version: str | None) -> str | None:
    """``package_digest`` of driver ``version`` for the node's profile, from the latest bundle
    that attests it (the GSP runbook's pin, a unit's previous known-good branch); None when no
    bundle does."""
    if version is None:
        return None
    found = await ctx.attested(node, Component.DRIVER, version)
    return None if found is None else await package_digest(ctx, *found)


async def plan_rollout(
    ctx: StepContext,
    claim: Claim,
    node: FleetNode,
    target: Target,
    entries: dict[str, AttestedComponent],
    progress: InBandProgress,
) -> None:
    """Preflight of a rollout's in-band components: what runs now, what the unit installs.
    ``progress.in_band`` is left unset when the node already runs the target."""
    if Component.DRIVER.value not in entries:
        listed = ", ".join(sorted(entries))
        raise AgentRefused(
            f"{listed}: installed only with the driver package as one unit (driver and GSP "
            "firmware from one package); the bundle names no driver"
        )
    progress.in_band = None  # planned afresh from this reading
    driver = entries[Component.DRIVER.value]
    digest = await package_digest(ctx, target, driver)
    state = await require_agent(ctx).state(order(claim, node))
    version = driver.version
    if state.runs(version) and all(
        state.versions().get(name) in {None, entry.version} for name, entry in entries.items()
    ):
        return
    known_good = (
        state.loaded_module
        if state.loaded_module and state.runs(state.loaded_module)
        else fallback_for(state, version)
    )
    progress.in_band = unit(
        version, known_good, {name: e.version for name, e in entries.items()}, state
    )
    progress.in_band.package_sha256 = digest
    progress.in_band.fallback_sha256 = await attested_digest(ctx, node, known_good)


async def run(
    ctx: StepContext, claim: Claim, node: FleetNode, progress: Progress, started: float
) -> None:
    held = in_band_of(progress)
    agent = require_agent(ctx)
    work = held.in_band
    assert work is not None  # noqa: S101 - planned before the item reaches in_band
    if work.started_at is None:
        work.started_at = ctx.wall()
    begun = work.started_at
    for _ in range(8):  # a unit is at most install, rebuild twice, reboot per attempt
        version = work.version if work.attempt == "target" else work.fallback
        assert version is not None  # noqa: S101 - the fallback attempt exists only with one
        try:
            state = await agent.state(order(claim, node, work))
        except AgentUnavailable as exc:
            if not work.sent.get(Call.REBOOT.value):
                raise
            await _rebooting(ctx, claim, held, work, state=None, why=str(exc))
            return
        nxt = next_call(state, version, work.sent)
        if nxt.call is Call.VERIFIED:
            await verified(ctx, claim, held, work, state, ctx.wall() - begun)
            return
        if nxt.call is Call.WAIT:
            await _rebooting(ctx, claim, held, work, state=state, why=nxt.reason)
            return
        if nxt.call in {Call.SECURE_BOOT, Call.UNKNOWN}:
            # Not this runbook (signing), or a call that may have been taken: a human.
            await quarantine(ctx, claim, held, work, state, nxt.reason)
            return
        if nxt.call is Call.FAILED:
            work.failures.append(clip_text(nxt.reason)[:512])
            tried = _tried(work, version)
            if tried is None:
                work.attempt, work.sent = "fallback", {}
                continue
            reason = f"{'; '.join(work.failures)}; {tried} failed: {ESCALATION}"
            await quarantine(ctx, claim, held, work, state, reason)
            return
        if not await _may_send(ctx, claim, node, held, work, nxt.call.value):
            return
        try:
            await _send(agent, order(claim, node, work), nxt.call, version)
        except AgentOutcomeUnknown:
            raise  # maybe taken: the mark stays, the next run reads what the node shows
        except AgentUnavailable:
            # The agent answered "not now" (or was never reached): it did not take it.
            work.sent[nxt.call.value] = False
            await ctx.save(claim, held)
            raise
    raise AgentUnavailable("the in-band unit did not settle; read again")


def _tried(work: InBandUnit, version: str) -> str | None:
    """What was tried when ``version`` did not come up clean; None: the previous known-good
    branch is still to be tried (there is one, and a bundle attests its package)."""
    if work.attempt == "fallback":
        return "the target and the previous branch"
    if work.fallback in {None, version}:
        return "the target (no previous known-good branch)"
    if work.fallback_sha256 is None:
        return f"the target (no attested package of the previous branch {work.fallback})"
    return None


async def _rebooting(
    ctx: StepContext,
    claim: Claim,
    progress: InBandProgress,
    work: InBandUnit,
    *,
    state: AgentState | None,
    why: str,
) -> None:
    """The node is rebooting: read again after ``retry_s`` (not a failed try), until the
    reboot deadline; then it did not come back, and stays out of service."""
    now = ctx.wall()
    since = work.reboot_sent_at or now
    deadline = ctx.in_band.reboot_deadline_s
    if now - since <= deadline:
        await ctx.commit(claim, S.IN_BAND, f"rebooting: {why}", progress, ctx.policy.retry_s)
        return
    reason = f"the node did not come back within {deadline:g}s: {why}"
    if state is None:
        await ctx.commit(claim, S.QUARANTINED, reason, progress)
        return
    await quarantine(ctx, claim, progress, work, state, reason)


async def _send(agent: NodeAgent, ordered: AgentOrder, call: Call, version: str) -> None:
    fence_write()  # an install or reboot from a worker whose lease may have lapsed: not sent
    if call is Call.INSTALL:
        await agent.install_driver(ordered, version)
    elif call is Call.REBUILD:
        await agent.rebuild_dkms(ordered)
    else:
        await agent.reboot(ordered)


async def _may_send(
    ctx: StepContext,
    claim: Claim,
    node: FleetNode,
    progress: InBandProgress,
    work: InBandUnit,
    call: str,
) -> bool:
    """The fence and the guard, and ``call`` recorded as sent, in one transaction. A halt
    before the unit's first call gives the node back unchanged; once the package is on
    the node the unit finishes (an in-flight device step finishes, issue 12 item 3). The
    node is drained already: no budget is asked."""
    work.sent[call] = True
    if call == Call.REBOOT.value:
        work.reboot_sent_at = ctx.wall()
    decision = await ctx.check(claim, node, takes_out=False, progress=progress, mark="in_band_sent")
    if decision.verdict is Verdict.PROCEED:
        return True
    work.sent[call] = False
    begun = any(work.sent.values()) or work.attempt == "fallback"
    if decision.verdict is Verdict.HALT and begun:
        work.sent[call] = True
        work.note = clip_text(f"{decision.reason}: finishing the driver unit in flight")
        await ctx.save(claim, progress)
        return True
    progress.ending = S.FAILED if decision.verdict is Verdict.REFUSE else S.CANCELLED
    progress.ending_reason = decision.reason
    await ctx.commit(claim, S.UNCORDONING, decision.reason, progress)
    return False


def unit(
    version: str, fallback: str | None, components: dict[str, str], state: AgentState
) -> InBandUnit:
    """A unit to install ``version`` (``fallback``: the previous known-good branch)."""
    read = state.versions()
    return InBandUnit(
        version=version,
        fallback=fallback,
        components=components,
        before={name: read.get(name) for name in components},
    )
