"""The sender's own fence (reliability.md B3): no write once this worker's lease may have lapsed.

The database fence (``UpdaterTx.still_holds``, the item's token) stops a stale worker's state
writes, but not what it sends afterwards: a worker paused (GC, SIGSTOP, a VM stall) between
committing "activation being sent" and sending it would wake past its lease, after another
worker took the item over, and still write to the BMC (Kleppmann, "How to do distributed
locking": a fencing token the resource does not check has to be checked by the sender). So the
worker keeps, on its own monotonic clock, the instant before the transaction that last proved
its claim (claimed it or renewed its lease): the database sets the lease to that transaction's
start (PostgreSQL ``now()``) plus ``lease_s``, never earlier than this instant plus ``lease_s``.
Every BMC write (any method but GET and HEAD through the node's session), every scheduler write
and every node-agent call (install, rebuild, reboot) checks it right before it leaves, the
reaper's claims as a worker's; a claim older than ``lease_s`` raises
:class:`~lockstep_updater.steps.ends.LostClaim` and nothing is sent.

The lease travels with the task running the claim's steps (a context variable set by the
executor), so the session and the steps need no claim to ask it; code run outside a claim
(a test driving a step by hand) has none and is not fenced here.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from lockstep_common.clock import Clock
from lockstep_updater.steps.ends import LostClaim


@dataclass(slots=True)
class HeldLease:
    """The lease of the claim this task runs, as this process's monotonic clock knows it."""

    clock: Clock
    lease_s: float
    proven: float
    """``clock.monotonic()`` taken before the transaction that last claimed or renewed it."""

    def renewed(self, since: float) -> None:
        """A transaction begun at ``since`` proved the claim (and renewed its lease)."""
        self.proven = max(self.proven, since)

    def check(self) -> None:
        """:class:`LostClaim` where the lease may have lapsed by now."""
        if self.clock.monotonic() - self.proven >= self.lease_s:
            raise LostClaim


HELD: ContextVar[HeldLease | None] = ContextVar("lockstep_updater_held_lease", default=None)


@contextmanager
def holding(clock: Clock, lease_s: float) -> Iterator[HeldLease]:
    """A claim about to be asked for (``proven`` now, before its transaction) and run in this
    block: its lease is this task's fence."""
    lease = HeldLease(clock, lease_s, clock.monotonic())
    token = HELD.set(lease)
    try:
        yield lease
    finally:
        HELD.reset(token)


def fence_write() -> None:
    """Right before a write leaves: :class:`LostClaim` where this task's lease may have
    lapsed (nothing is sent)."""
    held = HELD.get()
    if held is not None:
        held.check()


def renewed(since: float) -> None:
    """The claim this task runs was proven by a transaction begun at ``since``."""
    held = HELD.get()
    if held is not None:
        held.renewed(since)
