"""The executor's bounds (``ExecutorPolicy``), read by every step through its context."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from lockstep_redfish import RetryPolicy
from lockstep_redfish.profile import named_for
from lockstep_redfish.update import UpdatePolicy


@dataclass(frozen=True, slots=True)
class ExecutorPolicy:
    """Bounds of the executor (seconds)."""

    lease_s: float = 900.0  # longer than one step's longest wait (a task deadline)
    retry_s: float = 5.0  # before a step that could not finish is tried again
    drain_poll_s: float = 5.0
    drain_deadline_s: float = 3600.0
    # A node waiting for its pool's budget is woken when a place frees (``UpdaterTx.advance``
    # with ``parked``); behind that wake, every ``budget_recheck_s`` the worker sweeps each
    # pool with parked nodes once (``sweep_parked``): one statement per pool, where a
    # re-check of every parked node was a claim, an inventory read and a guard each (33,700
    # of them in the last wave of 12,500 nodes). A parked node re-checks on its own only
    # after ``parked_net_s``, the net should the sweep not run. (``budget_recheck_s`` is
    # also the pause of a preflight outside its maintenance windows.)
    budget_recheck_s: float = 60.0
    parked_net_s: float = 3600.0
    # How long a worker follows a pushed image's task before it gives the node back to the
    # queue (re-claimed after ``retry_s``): a GPU stages for a quarter of an hour (seed 000),
    # and a worker held that long caps how many nodes of a wave stage at once.
    task_hold_s: float = 60.0
    max_errors: int = 20  # failed tries of one step in a row before the node ends
    # A step that cannot read its node from the inventory waits (not a try of the node's):
    # retry_s, then twice as long each time, up to this, with jitter.
    inventory_backoff_max_s: float = 60.0
    remedy_max_unavailable: int = 1  # a pool's nodes out of service a GSP remedy may join
    reboot_deadline_s: float = 1800.0  # an in-band reboot not back by then: quarantined
    # BMC profiles named instead of preflight's choice: node id or hardware profile (SKU) ->
    # profile id (``Settings.bmc_profiles``); the node's id first.
    bmc_profiles: Mapping[str, str] = field(default_factory=dict)
    # Between two pushes to one BMC instead of its profile's min_gap_s (None: the profile's).
    push_gap_s: float | None = None
    # BMC sessions kept open between a node's steps, the longest unused logged out past it.
    bmc_sessions_max: int = 2048
    update: UpdatePolicy = field(default_factory=UpdatePolicy)
    transport: RetryPolicy = field(default_factory=RetryPolicy)

    def profile_named_for(self, node_id: str, sku: str) -> str | None:
        """The profile id named for the node (its id first, then its SKU); None: choose."""
        return named_for(self.bmc_profiles, node_id, sku)
