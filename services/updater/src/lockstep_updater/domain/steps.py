"""One node's update, as a persisted, resumable step machine (style.md section 7, rule 7).

A ``wave.planned`` event records one work item per node in ``pending``. A worker claims the
item under a lease whose fencing token is bumped on every claim, runs the step the state names,
and commits the next state only while its token is still the item's. A crashed worker's item
keeps its state until the lease lapses; the next claim re-runs that step (a ``s -> s`` move with
a new token), which is why every step is written to be safe to run again: the push step records
that it is about to send before it sends, and a re-run that finds that record never sends again
(design.md reliability rules, issue 12 "never twice").

The order follows the OCP flow with impactless staging (standards.md sections 1-2): stage the
images while the node still works, then cordon, drain, activate inside the window, wait for the
BMC, verify by reading the versions back, run the in-band steps through the node agent, and put
the node back in service. A node already at
the target finishes from ``preflight`` without a write. Failures before the node is taken out of
service end ``failed`` (nothing running changed); failures after it end ``quarantined`` (the node
stays out of service, with the reason). A halted rollout ends items that have not yet disturbed
their node as ``cancelled`` and walks the others back through ``uncordoning``.

The table is drawn in docs/updater.md; a unit test keeps the two equal. The strings are the
values of ``updater.node_work.state`` (migrations/0001_updater.sql).
"""

from __future__ import annotations

import enum

from lockstep_common.transitions import Transitions


class NodeStep(enum.StrEnum):
    """Where one node's update is: the step to run next (or the end reached)."""

    PENDING = "pending"
    """Recorded from ``wave.planned``; no worker has claimed it yet."""
    PREFLIGHT = "preflight"
    """Read the node's facts and versions; decide what needs a write."""
    STAGING = "staging"
    """Push each image to the inactive bank while the node still runs its jobs."""
    CORDONING = "cordoning"
    """Tell the scheduler to stop placing work on the node."""
    DRAINING = "draining"
    """Wait until the node's jobs have ended."""
    ACTIVATING = "activating"
    """Switch the staged images in (bank flip, reset)."""
    AWAITING_BMC = "awaiting_bmc"
    """Wait for the BMC to answer again after the activation reset."""
    VERIFYING = "verifying"
    """Read every target back: success is the version read, never a task state."""
    IN_BAND = "in_band"
    """Through the node agent: the driver package (driver, GSP firmware, CUDA, NCCL, fabric
    manager as one unit), DKMS, reboot, then the module and GSP firmware read back and the
    diagnostic run; the GSP runbook (seed 004) is this step on its own."""
    UNCORDONING = "uncordoning"
    """Give the node back to the scheduler (only a drain Lockstep made)."""
    DONE = "done"
    """Every component verified at its target (or was already there)."""
    CANCELLED = "cancelled"
    """The rollout halted before this node was changed; it runs what it ran before."""
    FAILED = "failed"
    """Refused or failed before anything running changed (the node stays in service)."""
    QUARANTINED = "quarantined"
    """Failed after the node left service: it stays out of service, with the reason."""


INITIAL = NodeStep.PENDING
S = NodeStep

ALLOWED: dict[NodeStep, frozenset[NodeStep]] = {
    S.PENDING: frozenset({S.PREFLIGHT, S.CANCELLED, S.FAILED}),
    # Every working state may move to itself: the holder's lease lapsed and another claim
    # re-runs the step with a new fencing token.
    # Straight to cordoning: a GSP runbook item (kind ``remedy``) has nothing to stage.
    S.PREFLIGHT: frozenset({S.PREFLIGHT, S.STAGING, S.CORDONING, S.DONE, S.CANCELLED, S.FAILED}),
    # Every target found at the version while staging (written by someone else): no drain.
    S.STAGING: frozenset({S.STAGING, S.CORDONING, S.DONE, S.CANCELLED, S.FAILED}),
    # A foreign drain or a refused cordon: the node was never ours to take; nothing to undo.
    # The pool's budget is checked here, and the move to draining commits under it.
    S.CORDONING: frozenset({S.CORDONING, S.DRAINING, S.CANCELLED, S.FAILED}),
    # Drain deadline passed, a foreign drain found, or the rollout halted: uncordoning gives
    # back only a drain of Lockstep's own, so the node ends as it was.
    # A remedy item has no firmware to activate: drained, it goes to its in-band steps.
    S.DRAINING: frozenset({S.DRAINING, S.ACTIVATING, S.IN_BAND, S.UNCORDONING}),
    S.ACTIVATING: frozenset({S.ACTIVATING, S.AWAITING_BMC, S.UNCORDONING, S.QUARANTINED}),
    S.AWAITING_BMC: frozenset({S.AWAITING_BMC, S.VERIFYING, S.QUARANTINED}),
    # In-band components (driver, CUDA, NCCL, fabric manager) after the firmware verified
    # (issue 12 item 2); none: straight to uncordoning.
    S.VERIFYING: frozenset({S.VERIFYING, S.IN_BAND, S.UNCORDONING, S.QUARANTINED}),
    # Verified (or back on the previous known-good branch): given back. Neither branch comes
    # up clean, or Secure Boot rejects the module: quarantined (seed 004 "Escalate").
    S.IN_BAND: frozenset({S.IN_BAND, S.UNCORDONING, S.QUARANTINED}),
    S.UNCORDONING: frozenset({S.UNCORDONING, S.DONE, S.CANCELLED, S.FAILED}),
    S.DONE: frozenset(),
    S.CANCELLED: frozenset(),
    S.FAILED: frozenset(),
    S.QUARANTINED: frozenset(),
}

TERMINAL = frozenset(s for s, nexts in ALLOWED.items() if not nexts)
OUT_OF_SERVICE = frozenset(
    {S.DRAINING, S.ACTIVATING, S.AWAITING_BMC, S.VERIFYING, S.IN_BAND, S.UNCORDONING}
)
"""States in which the node counts against its pool's out-of-service budget: the cordon may
have been sent. ``cordoning`` is the wait for budget, so it does not count (two waiting nodes
would otherwise hold each other's place). Quarantined nodes are the failure budget's concern."""


transition = Transitions("node step", ALLOWED)
"""``transition(current, target)``: ``target`` if the table allows the move, else
:class:`InvalidTransition`."""


def runs_on(before: NodeStep, after: NodeStep) -> bool:
    """A claim that moved its item from ``before`` to ``after`` may run the next step itself
    (``UpdaterTx.advance`` with ``keep_lease_s``): the item moved forward to a working state.
    A step that stays where it was waits for its retry instead, and the table allows no move
    back, so a claim runs at most one pass through the table."""
    return after is not before and after not in TERMINAL
