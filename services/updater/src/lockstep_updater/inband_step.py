"""The in-band step of the step machine: the driver package unit through the node agent, for a
rollout's in-band components (issue 12 item 2) and for the GSP / driver runbook (item 5,
seed 004), whose whole repair it is.

Each run reads the agent first and makes the one call ``domain.inband.next_call`` names; the
executor's fence and guard are checked, and the call recorded as sent, in one transaction right
before it is made (as for a push or an activation), so a re-run never sends it again: it reads
what the node shows instead. A unit that does not come up clean is tried once on the previous
known-good branch (seed 004 "Rollback"); failing both, the node is quarantined and escalated as
hardware ("GPU fault / RMA"). Secure Boot refusing the module is not this runbook: the node is
quarantined with that reason and nothing is retried.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from lockstep_common.envelope import EventData
from lockstep_common.events.v1 import (
    AttestedComponent,
    DeviceFailed,
    DeviceRolledBack,
    DeviceVerified,
    FleetNode,
)
from lockstep_common.vocabulary import Component, DeviceOutcome, clip_text
from lockstep_updater.domain.guard import Decision, Verdict
from lockstep_updater.domain.inband import (
    IN_BAND,
    AgentState,
    Call,
    fallback_for,
    next_call,
)
from lockstep_updater.domain.steps import NodeStep
from lockstep_updater.ports import (
    AgentOutcomeUnknown,
    AgentRefused,
    AgentUnavailable,
    NodeAgent,
)
from lockstep_updater.store import REMEDY, Claim, Target

S = NodeStep
Events = list[tuple[DeviceOutcome, EventData]]
ESCALATION = "escalated as hardware (seed 004: GPU fault / RMA path)"


class Check(Protocol):
    async def __call__(
        self, claim: Claim, node: FleetNode, *, progress_mark: dict[str, Any], mark: str
    ) -> Decision: ...


class Commit(Protocol):
    async def __call__(
        self,
        claim: Claim,
        target: NodeStep,
        reason: str,
        progress: dict[str, Any],
        retry_in_s: float = 0.0,
        *,
        events: Sequence[tuple[DeviceOutcome, EventData]] = (),
    ) -> None: ...


def in_band_names(components: Sequence[str]) -> list[str]:
    """The work item's components installed through the agent."""
    return [c for c in components if Component(c) in IN_BAND]


class InBandSteps:
    """The in-band step, driven by the executor (its check, commit and retry pause)."""

    def __init__(
        self,
        agent: NodeAgent | None,
        *,
        check: Check,
        commit: Commit,
        save: Callable[[Claim, dict[str, Any]], Awaitable[None]],
        image: Callable[[Target, AttestedComponent], object],
        poll_s: float = 5.0,
        reboot_deadline_s: float = 1800.0,
    ) -> None:
        self.agent = agent
        # A node rebooting (the agent silent, or answering "rebooting") is polled every
        # ``poll_s`` without counting as a failed try, up to ``reboot_deadline_s``.
        self.poll_s = poll_s
        self.reboot_deadline_s = reboot_deadline_s
        self._check = check
        self._commit = commit
        self._save = save
        self._image = image

    def _require(self) -> NodeAgent:
        if self.agent is None:
            raise AgentRefused("no node agent channel is configured (LOCKSTEP_UPDATER_AGENT_URL)")
        return self.agent

    # -- planning --------------------------------------------------------------------------

    async def plan_rollout(
        self,
        claim: Claim,
        target: Target,
        node: FleetNode,
        entries: dict[str, AttestedComponent],
        progress: dict[str, Any],
    ) -> None:
        """Preflight of a rollout's in-band components: what runs now, what the unit installs.
        ``progress["in_band"]`` is left unset when the node already runs the target."""
        if Component.DRIVER.value not in entries:
            names = ", ".join(sorted(entries))
            raise AgentRefused(
                f"{names}: installed only with the driver package as one unit (driver and GSP "
                "firmware from one package); the bundle names no driver"
            )
        progress.pop("in_band", None)  # planned afresh from this reading
        driver = entries[Component.DRIVER.value]
        self._image(target, driver)  # the attested package, re-hashed: a mismatch fails closed
        state = await self._require().state(claim.node_id)
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
        progress["in_band"] = _unit(
            version,
            known_good,
            {name: e.version for name, e in entries.items()},
            state,
        )

    async def remedy_preflight(
        self, claim: Claim, node: FleetNode, progress: dict[str, Any]
    ) -> None:
        """The runbook's pre-checks (seed 004): read the node; aligned already means nothing
        to do; Secure Boot refusing the module is not this runbook; otherwise the pinned
        branch (the drift's pin, else the installed driver package) and the previous
        known-good branch, then to cordoning."""
        state = await self._require().state(claim.node_id)
        progress["pool"] = node.pool
        pin = progress.get("pin") or state.driver
        if state.module_rejected:
            await self._commit(
                claim,
                S.FAILED,
                _secure_boot_reason(),
                progress,
                events=_failed(claim, pin, state, "preflight", _secure_boot_reason()),
            )
            return
        if state.runs(pin):
            await self._commit(
                claim,
                S.DONE,
                f"{pin}: module and GSP firmware agree, diag passes: nothing written",
                progress,
            )
            return
        if "in_band" not in progress:
            progress["in_band"] = _unit(
                pin, fallback_for(state, pin), {Component.DRIVER.value: pin}, state
            )
        await self._commit(claim, S.CORDONING, f"runbook: reinstall {pin} as one unit", progress)

    # -- the step --------------------------------------------------------------------------

    async def run(self, claim: Claim, node: FleetNode, progress: dict[str, Any]) -> None:
        agent = self._require()
        unit: dict[str, Any] = progress["in_band"]
        started = float(unit.setdefault("started_at", time.time()))
        for _ in range(8):  # a unit is at most install, rebuild twice, reboot per attempt
            version = unit["fallback"] if unit["attempt"] == "fallback" else unit["version"]
            try:
                state = await agent.state(claim.node_id)
            except AgentUnavailable as exc:
                if not unit["sent"].get("reboot"):
                    raise
                await self._rebooting(claim, progress, unit, state=None, why=str(exc))
                return
            nxt = next_call(state, version, unit["sent"])
            if nxt.call is Call.VERIFIED:
                await self._verified(claim, progress, unit, state, started)
                return
            if nxt.call is Call.WAIT:
                await self._rebooting(claim, progress, unit, state=state, why=nxt.reason)
                return
            if nxt.call in {Call.SECURE_BOOT, Call.UNKNOWN}:
                # Not this runbook (signing), or a call that may have been taken: a human.
                await self._quarantine(claim, progress, unit, state, nxt.reason)
                return
            if nxt.call is Call.FAILED:
                unit.setdefault("failures", []).append(clip_text(nxt.reason)[:512])
                if unit["attempt"] == "target" and unit.get("fallback") not in {None, version}:
                    unit["attempt"], unit["sent"] = "fallback", {}
                    continue
                why = "; ".join(unit["failures"])
                tried = (
                    "the target and the previous branch"
                    if unit["attempt"] == "fallback"
                    else "the target (no previous known-good branch)"
                )
                await self._quarantine(
                    claim, progress, unit, state, f"{why}; {tried} failed: {ESCALATION}"
                )
                return
            if not await self._may_send(claim, node, progress, unit, nxt.call.value):
                return
            try:
                await self._send(agent, claim.node_id, nxt.call, version)
            except AgentOutcomeUnknown:
                raise  # maybe taken: the mark stays, the next run reads what the node shows
            except AgentUnavailable:
                # The agent answered "not now" (or was never reached): it did not take it.
                unit["sent"][nxt.call.value] = False
                await self._save(claim, progress)
                raise
        raise AgentUnavailable("the in-band unit did not settle; read again")

    async def _rebooting(
        self,
        claim: Claim,
        progress: dict[str, Any],
        unit: dict[str, Any],
        *,
        state: AgentState | None,
        why: str,
    ) -> None:
        """The node is rebooting: read again after ``poll_s`` (not a failed try), until the
        reboot deadline; then it did not come back, and stays out of service."""
        since = float(unit.get("reboot_sent_at") or time.time())
        if time.time() - since <= self.reboot_deadline_s:
            await self._commit(claim, S.IN_BAND, f"rebooting: {why}", progress, self.poll_s)
            return
        reason = f"the node did not come back within {self.reboot_deadline_s:g}s: {why}"
        if state is None:
            await self._commit(claim, S.QUARANTINED, reason, progress)
            return
        await self._quarantine(claim, progress, unit, state, reason)

    @staticmethod
    async def _send(agent: NodeAgent, node_id: str, call: Call, version: str) -> None:
        if call is Call.INSTALL:
            await agent.install_driver(node_id, version)
        elif call is Call.REBUILD:
            await agent.rebuild_dkms(node_id)
        else:
            await agent.reboot(node_id)

    async def _may_send(
        self,
        claim: Claim,
        node: FleetNode,
        progress: dict[str, Any],
        unit: dict[str, Any],
        call: str,
    ) -> bool:
        """The fence and the guard, and ``call`` recorded as sent, in one transaction. A halt
        before the unit's first call gives the node back unchanged; once the package is on
        the node the unit finishes (an in-flight device step finishes, issue 12 item 3)."""
        unit["sent"][call] = True
        if call == Call.REBOOT.value:
            unit["reboot_sent_at"] = time.time()
        decision = await self._check(claim, node, progress_mark=progress, mark="in_band_sent")
        if decision.verdict is Verdict.PROCEED:
            return True
        unit["sent"][call] = False
        begun = any(unit["sent"].values()) or unit["attempt"] == "fallback"
        if decision.verdict is Verdict.HALT and begun:
            unit["sent"][call] = True
            unit["note"] = clip_text(f"{decision.reason}: finishing the driver unit in flight")
            await self._save(claim, progress)
            return True
        ending = S.FAILED if decision.verdict is Verdict.REFUSE else S.CANCELLED
        progress["ending"] = ending.value
        progress["ending_reason"] = decision.reason
        await self._commit(claim, S.UNCORDONING, decision.reason, progress)
        return False

    # -- endings ---------------------------------------------------------------------------

    async def _verified(
        self,
        claim: Claim,
        progress: dict[str, Any],
        unit: dict[str, Any],
        state: AgentState,
        started: float,
    ) -> None:
        duration = round(max(0.0, time.time() - started), 3)
        events: Events = []
        read = state.versions()
        if unit["attempt"] == "fallback":
            # Back on the previous known-good branch (seed 004 "Rollback"): in service again,
            # but the change did not happen.
            events.append(
                (
                    DeviceOutcome.ROLLED_BACK,
                    DeviceRolledBack(
                        rollout_id=claim.rollout_id,
                        node_id=claim.node_id,
                        component=Component.DRIVER,
                        from_version=unit["version"],
                        to_version=unit["fallback"],
                        duration_s=duration,
                        reason=clip_text("; ".join(unit.get("failures", []))),
                    ),
                )
            )
            reason = (
                f"{unit['version']} did not come up clean; back on the previous known-good "
                f"branch {unit['fallback']} (pin the node to it and fix the upgrade path)"
            )
            # A runbook that restored a clean node did its job; a rollout's node did not move.
            progress["ending"] = (S.DONE if claim.kind == REMEDY else S.FAILED).value
            progress["ending_reason"] = reason
            await self._commit(claim, S.UNCORDONING, reason, progress, events=events)
            return
        for name, wanted in unit["components"].items():
            events.append(
                (
                    DeviceOutcome.VERIFIED,
                    DeviceVerified(
                        rollout_id=claim.rollout_id,
                        node_id=claim.node_id,
                        component=Component(name),
                        from_version=unit["before"].get(name),
                        to_version=read.get(name) or wanted,
                        duration_s=duration,
                    ),
                )
            )
        progress["ending"] = S.DONE.value
        reason = f"{unit['version']}: module and GSP firmware agree, diag passes"
        if claim.kind == REMEDY:
            progress["ending_reason"] = reason
        await self._commit(claim, S.UNCORDONING, reason, progress, events=events)

    async def _quarantine(
        self,
        claim: Claim,
        progress: dict[str, Any],
        unit: dict[str, Any],
        state: AgentState,
        reason: str,
    ) -> None:
        events = _failed(claim, unit["version"], state, S.IN_BAND.value, reason, unit)
        await self._commit(claim, S.QUARANTINED, reason, progress, events=events)


def _unit(
    version: str, fallback: str | None, components: dict[str, str], state: AgentState
) -> dict[str, Any]:
    read = state.versions()
    return {
        "version": version,
        "fallback": fallback,
        "attempt": "target",
        "sent": {},
        "components": components,
        "before": {name: read.get(name) for name in components},
    }


def _secure_boot_reason() -> str:
    return (
        "Secure Boot rejected the nvidia module (module verification failed): not a GSP "
        "mismatch (seed 004 'Not this runbook'); sign the module or enroll a MOK; not retried"
    )


def _failed(
    claim: Claim,
    version: str,
    state: AgentState,
    step: str,
    reason: str,
    unit: dict[str, Any] | None = None,
) -> Events:
    components = (unit or {}).get("components") or {Component.DRIVER.value: version}
    read = state.versions()
    return [
        (
            DeviceOutcome.FAILED,
            DeviceFailed(
                rollout_id=claim.rollout_id,
                node_id=claim.node_id,
                component=Component(name),
                from_version=((unit or {}).get("before") or {}).get(name) or read.get(name),
                to_version=wanted,
                step=step,
                reason=clip_text(reason),
            ),
        )
        for name, wanted in components.items()
    ]


__all__ = ["InBandSteps", "in_band_names"]
