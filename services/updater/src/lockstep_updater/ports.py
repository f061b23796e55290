"""What the executor needs of the world besides its store, as small interfaces.

- :class:`NodeFacts`: a node as the inventory knows it now (``fleet.query``), re-read before
  every write (design.md non-negotiable 4: read before write); :class:`ReadsWaves`, facts that
  read a whole wave's nodes at once and serve its steps from that copy until the node's
  registry entry changes (``adapters.wave_facts``).
- :class:`Scheduler`: cordon, drain and resume (the simulator's scheduler API and Slurm,
  ``schedulers.py`` picks one; Kubernetes behind the same calls later).
- :class:`Images`: the bytes of one image of an attested bundle.
- :class:`NodeAgent`: the node agent's in-band channel (driver package, DKMS, reboot), read
  before every call (``domain.inband``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from lockstep_common.errors import PermanentError, TransientError
from lockstep_common.events.v1 import FleetNode
from lockstep_updater.domain.drains import OWNER, DrainState
from lockstep_updater.domain.inband import AgentState

__all__ = [
    "OWNER",
    "AgentOrder",
    "AgentOutcomeUnknown",
    "AgentRefused",
    "AgentState",
    "AgentUnavailable",
    "DrainState",
    "ExplainsDrain",
    "ForeignDrain",
    "Images",
    "ListsOwnDrains",
    "NodeAgent",
    "NodeFacts",
    "ReadsWaves",
    "Scheduler",
    "SchedulerUnavailable",
]


class NodeFacts(Protocol):
    async def node(self, node_id: str) -> FleetNode | None:
        """The node as registered now; None when the inventory does not know it."""
        ...


@runtime_checkable
class ReadsWaves(Protocol):
    """Facts that read every node of a wave at once (``adapters.wave_facts.WaveFacts``)."""

    async def wave_node(
        self, node_id: str, wave: Hashable, members: Callable[[], Awaitable[Sequence[str]]]
    ) -> FleetNode | None:
        """The node as registered (a copy no older than its entry); ``members``: the ids of
        ``wave``, read at once when the node has no copy."""
        ...


class SchedulerUnavailable(TransientError, OSError):
    """The scheduler did not answer usefully; try the step again later (an ``OSError``, so the
    executor retries the step like any other "not now")."""


class ForeignDrain(PermanentError):
    """The node is drained by someone else: theirs to resume, never ours to take."""


class Scheduler(Protocol):
    async def cordon(self, node_id: str, reason: str) -> None:
        """Stop placing work on the node (idempotent for Lockstep's own drain);
        :class:`ForeignDrain` when someone else drained it."""
        ...

    async def drain_state(self, node_id: str) -> DrainState:
        """Whether Lockstep's drain of the node has completed."""
        ...

    async def resume(self, node_id: str) -> bool:
        """Give the node back, only if Lockstep drained it; False when there was nothing of
        Lockstep's to undo (a foreign drain stays as it was)."""
        ...


@runtime_checkable
class ExplainsDrain(Protocol):
    """A scheduler that can say why a drain has not completed (Kubernetes: a
    PodDisruptionBudget refusing evictions): the reason a node skipped at the drain deadline
    ends with."""

    def drain_blocker(self, node_id: str) -> str | None:
        """Why the node is not drained yet (starting ``pdb:`` for a budget); None: unknown."""
        ...


@runtime_checkable
class ListsOwnDrains(Protocol):
    """A scheduler that can list every node Lockstep holds drained: how a cordon that took
    effect after its work item ended (sent by a worker killed mid-request; a Slurm
    ``scontrol`` child outliving its updater) is found and given back (``Executor.strays``)."""

    async def own_drains(self) -> list[str]:
        """The nodes whose drain or cordon is Lockstep's now, finished or not."""
        ...


class Images(Protocol):
    def read(self, bundle_uri: str, image: str) -> bytes:
        """The bytes of ``image`` (a path inside the bundle); ``OSError`` / ``ValueError``
        when it cannot be read from there."""
        ...


class AgentUnavailable(TransientError, OSError):
    """The node agent did not answer usefully (down, rebooting, 5xx): try the step later."""


class AgentOutcomeUnknown(AgentUnavailable):
    """A call was sent and no answer came (a timeout, a dropped connection): the agent may
    have taken it, so it is never sent again blindly; the next run reads the node."""


class AgentRefused(PermanentError):
    """The node agent refused the call (its credentials, a step its phase does not allow, a
    node it does not serve): not retried."""


@dataclass(frozen=True, slots=True)
class AgentOrder:
    """Who asks a node agent, under which fence, for which attested bytes: every call carries
    it, so the agent can refuse a lapsed holder or bytes the bundle does not name."""

    site: str
    node_id: str
    work_item: str
    fencing_token: int
    attempt: str
    """The unit's attempt (``target``, ``fallback``): with the work item and the call, it
    makes the command id, so a call re-sent after a crash carries the id it had."""
    package_sha256: str | None = None
    """SHA-256 of the attested driver package (None: no attested package for this attempt)."""

    def command_id(self, call: str) -> str:
        """Deterministic: the same work item, attempt and call always name the same command."""
        return f"{self.work_item}-{self.attempt}-{call}"


class NodeAgent(Protocol):
    """The node agent's in-band channel; every call answers the node's state after it."""

    async def state(self, order: AgentOrder) -> AgentState:
        """What the agent reads on the node now."""
        ...

    async def install_driver(self, order: AgentOrder, version: str) -> AgentState:
        """Install the driver package of ``version`` as one unit (its GSP firmware, CUDA user
        space, fabric manager); the package's install builds DKMS."""
        ...

    async def rebuild_dkms(self, order: AgentOrder) -> AgentState:
        """Build the module against the kernel that boots next."""
        ...

    async def reboot(self, order: AgentOrder) -> AgentState:
        """Reboot the node (its module loads, or fails to)."""
        ...
