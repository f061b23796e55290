"""How a step ends other than by committing its next state: the exceptions a step raises for
the executor to commit (``Stop``, ``NotYet``; ``LostClaim`` when another claim took the item
over), and the rules that say where a failure or a guard's verdict ends the node."""

from __future__ import annotations

from lockstep_updater.domain.guard import Decision, Verdict
from lockstep_updater.domain.progress import FirmwareProgress, Progress
from lockstep_updater.domain.steps import NodeStep
from lockstep_updater.store import Claim

S = NodeStep
CHANGED = frozenset({S.ACTIVATING, S.AWAITING_BMC, S.VERIFYING, S.IN_BAND})
"""Steps after which the running firmware may have changed: a failure quarantines the node."""
KEEPS_CORDON = frozenset({S.DRAINING, *CHANGED, S.QUARANTINED})
"""Steps in which the node must stay cordoned (uncordoning gives it back, once, itself)."""


class LostClaim(Exception):
    """Another claim took the item over: this worker stops touching it."""


class Stop(Exception):
    """The step ends here, in ``target`` (raised from deep inside a step)."""

    def __init__(self, target: NodeStep, reason: str) -> None:
        super().__init__(reason)
        self.target = target
        self.reason = reason


class NotYet(Exception):
    """The step waits on a device (a BMC's task still running after ``task_hold_s``, a BMC
    not answering yet after a reset): it is run again after ``retry_s``, by whoever claims
    the item then."""


def failure_end(claim: Claim) -> NodeStep:
    """Where a failure of the claimed step ends the node."""
    return S.QUARANTINED if claim.state in CHANGED else S.FAILED


def stop_unless_proceed(decision: Decision) -> None:
    """A guard's verdict other than PROCEED ends the step (refused: failed; else cancelled)."""
    if decision.verdict is Verdict.PROCEED:
        return
    if decision.verdict is Verdict.REFUSE:
        raise Stop(S.FAILED, f"refused: {decision.reason}")
    raise Stop(S.CANCELLED, decision.reason)


def ending(decision: Decision) -> NodeStep:
    """How a node the guard stopped after its cordon ends, once given back."""
    return S.FAILED if decision.verdict is Verdict.REFUSE else S.CANCELLED


def waits_on_device(state: NodeStep, progress: Progress) -> bool:
    """The step follows something a BMC accepted (a push, an activation) or waits for a BMC
    to come back after one: a BMC that does not answer is then waited for, not retried."""
    if state is S.AWAITING_BMC:
        return True
    if not isinstance(progress, FirmwareProgress):
        return False
    if state is S.ACTIVATING and progress.activate_sent:
        return True
    plans = progress.components.values()
    return state in (S.STAGING, S.ACTIVATING) and any(p.sent and not p.done for p in plans)
