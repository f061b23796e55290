"""The facts of a wave's nodes, read once per wave (issue 28 item 3): :class:`WaveFacts`.

Every step reads its node (where its BMC is, how to log in, its pool and site for the guard:
design.md non-negotiable 4, read before write). Asked of the inventory one ``fleet.query`` per
step, a 12,500-node rollout sent tens of thousands of requests, thousands of which timed out
(draining and awaiting_bmc repeat their step many times). Here the first step of a wave that
needs a node reads every node of its wave that is not held yet, one request per page of
``MAX_FLEET_PAGE`` ids (``FleetQuery.nodes``), and later steps are served from that copy.

The contract:

- **A copy is never older than its registry entry as last announced.** Each node carries its
  registry version (``FleetNode.version``, drawn anew by the inventory in the transaction of
  every change). :meth:`changed` takes an announcement ``(node, version)``: a held copy of an
  older version is dropped, and until a read returns that version no copy older is kept, so the
  node's next step, and every write it makes, reads it anew (an announcement that arrives before
  the change is visible is waited out the same way). An announcement carries no facts, only that
  a node must be read again: the worst a forged or repeated one can do is cost a read.
- **A copy is never older than ``ttl_s``**, announced or not: the safety net for an
  announcement lost (a core-NATS message is at most once; an inventory that stopped between its
  announcement and its commit). One whole wave then costs its pages again, once per ``ttl_s``;
  and every copy is dropped when the connection the announcements come on came back (``epoch``).
- **Bounded**: at most ``max_nodes`` copies, the least recently used dropped first.
- A node not in its wave's list (a GSP remedy, an operator's release: no wave), or not in the
  answer, is asked on its own (``FleetQuery.node``), as before; so is one whose wave's read
  failed (then its step waits for the inventory like any other read it could not make).
- Reads of one wave are made once at a time: the executor's concurrent claim loops that all
  miss at a wave's start wait for the one read instead of each sending it.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Protocol

from lockstep_common.clock import SYSTEM_CLOCK, Clock
from lockstep_common.events.v1 import MAX_FLEET_PAGE, FleetNode, ScopeSelector
from lockstep_updater.ports import NodeFacts, ReadsWaves
from lockstep_updater.store import Claim, UpdaterStore

DEFAULT_TTL_S = 60.0
"""As old as a copy may get: about the length of one step before (a push, a drain poll).
The service's setting ``wave_facts_ttl_s``."""
DEFAULT_MAX_NODES = 20_000
"""A 12,500-node fleet's every node (a copy is about a kilobyte); ``wave_facts_max_nodes``."""

Members = Callable[[], Awaitable[Sequence[str]]]
"""The node ids of a wave, asked only when a copy is missing."""


class FleetReads(Protocol):
    """What is read of the inventory (``lockstep_common.fleet_query.FleetQuery``)."""

    async def nodes(self, scope: ScopeSelector | None) -> list[FleetNode]: ...

    async def node(self, node_id: str) -> FleetNode | None: ...


@dataclass(frozen=True, slots=True)
class _Copy:
    node: FleetNode
    read_at: float


class WaveFacts:
    """``NodeFacts`` served from bounded, versioned copies of a wave's nodes (module docstring)."""

    def __init__(
        self,
        fleet: FleetReads,
        *,
        ttl_s: float = DEFAULT_TTL_S,
        max_nodes: int = DEFAULT_MAX_NODES,
        clock: Clock = SYSTEM_CLOCK,
        epoch: Callable[[], int] | None = None,
    ) -> None:
        """``epoch``: a count that moves when announcements may have been missed (the NATS
        connection came back, ``fleet_changes.reconnects``): every copy is dropped then."""
        if ttl_s <= 0 or max_nodes <= 0:
            raise ValueError("WaveFacts needs a positive ttl_s and max_nodes")
        self._fleet = fleet
        self._ttl_s = ttl_s
        self._max = max_nodes
        self._clock = clock
        self._copies: OrderedDict[str, _Copy] = OrderedDict()
        self._announced: OrderedDict[str, int] = OrderedDict()
        self._reading: dict[Hashable, asyncio.Lock] = {}
        self._epoch = epoch
        self._seen = epoch() if epoch is not None else 0

    def __len__(self) -> int:
        return len(self._copies)

    async def node(self, node_id: str) -> FleetNode | None:
        """The node's copy, or the node asked on its own (``NodeFacts``)."""
        held = self._fresh(node_id)
        if held is not None:
            return held
        node = await self._fleet.node(node_id)
        if node is not None:
            self._keep(node)
        return node

    async def wave_node(self, node_id: str, wave: Hashable, members: Members) -> FleetNode | None:
        """The node's copy; when there is none, every node of ``wave`` (``members``) without
        one read first, a page at a time, once at a time per wave."""
        held = self._fresh(node_id)
        if held is not None:
            return held
        lock = self._reading.setdefault(wave, asyncio.Lock())
        async with lock:
            held = self._fresh(node_id)  # another loop read the wave meanwhile
            if held is None:
                ids = [n for n in dict.fromkeys(await members()) if self._fresh(n) is None]
                if node_id in ids:
                    # As read now, even where it is not kept (older than announced).
                    held = (await self._read(ids)).get(node_id)
        if not lock.locked():
            self._reading.pop(wave, None)
        return held if held is not None else await self.node(node_id)

    def changed(self, node_id: str, version: int) -> None:
        """The node's registry entry is at ``version`` now: a copy older is dropped and none
        older is kept from now on (for as long as the announcement is remembered: the same
        bound as the copies)."""
        if version > self._announced.get(node_id, -1):
            self._announced[node_id] = version
            self._announced.move_to_end(node_id)
            while len(self._announced) > self._max:
                self._announced.popitem(last=False)
        held = self._copies.get(node_id)
        if held is not None and held.node.version < version:
            del self._copies[node_id]

    def forget_all(self) -> None:
        """Drop every copy (announcements may have been missed: the connection was lost)."""
        self._copies.clear()

    async def _read(self, ids: Sequence[str]) -> dict[str, FleetNode]:
        read: dict[str, FleetNode] = {}
        for first in range(0, len(ids), MAX_FLEET_PAGE):
            page = ids[first : first + MAX_FLEET_PAGE]
            asked = set(page)
            for node in await self._fleet.nodes(ScopeSelector(nodes=tuple(page))):
                if node.node_id in asked:  # nothing kept that was not asked for
                    read[node.node_id] = node
                    self._keep(node)
        return read

    def _fresh(self, node_id: str) -> FleetNode | None:
        if self._epoch is not None and self._epoch() != self._seen:
            self._seen = self._epoch()
            self.forget_all()
        held = self._copies.get(node_id)
        if held is None:
            return None
        if self._clock.monotonic() - held.read_at >= self._ttl_s:
            del self._copies[node_id]
            return None
        self._copies.move_to_end(node_id)
        return held.node

    def _keep(self, node: FleetNode) -> None:
        if node.version < self._announced.get(node.node_id, 0):
            return  # older than announced: served this once, never kept
        self._copies[node.node_id] = _Copy(node, self._clock.monotonic())
        self._copies.move_to_end(node.node_id)
        while len(self._copies) > self._max:
            self._copies.popitem(last=False)


async def read_node(store: UpdaterStore, facts: NodeFacts, claim: Claim) -> FleetNode | None:
    """How a step reads its node (``StepContext.node``): from its wave's copy where the facts
    keep one (``ReadsWaves``), else asked on its own; None when the inventory does not know it.
    """
    if not isinstance(facts, ReadsWaves):
        return await facts.node(claim.node_id)

    async def wave() -> list[str]:
        """The nodes the approved plan puts in the claim's wave (none for a GSP remedy)."""
        async with store.transaction() as tx:
            waves = await tx.plan_waves(claim.rollout_id)
        return [node for node, number in waves.items() if number == claim.wave]

    return await facts.wave_node(claim.node_id, (claim.rollout_id, claim.wave), wave)
