"""What ``ingest`` and the handlers need of the inventory's storage: two small Protocols, and
the handlers' unit of work over them (``InventoryTx``).

``NodeStore`` is a node's state (registry rows, latest reports, history, drift sets, pins) plus
the rollout facts drift is judged with; ``RolloutStore`` records the rollout side (wave
membership, rollout steps). Both are implemented over one open transaction by
``adapters/pg_store.PgInventoryStore`` and in memory by
``lockstep_inventory.testing.MemoryInventoryStore``, so handler logic is unit-tested without
PostgreSQL and the same contract test runs against both.

Every method runs in the caller's transaction: nothing here commits.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from lockstep_common.envelope import Envelope, EventData
from lockstep_common.outbox import EventSink
from lockstep_inventory.domain.evaluate import RolloutFacts
from lockstep_inventory.domain.fleet_file import NodeEntry
from lockstep_inventory.domain.ingestion import DriftRow, Head, HistoryRow, Key, Observations
from lockstep_inventory.domain.observation import Observation
from lockstep_inventory.domain.pins import Pin


class NodeStore(Protocol):
    """Nodes' state, read and written inside one transaction."""

    async def lock_nodes(self, node_ids: Iterable[str]) -> dict[str, NodeEntry]:
        """The registered nodes among ``node_ids``, locked (id order) until the transaction
        ends, so two writers never interleave on one node."""
        ...

    async def lock_nodes_judged(
        self, node_ids: Iterable[str]
    ) -> tuple[dict[str, NodeEntry], dict[str, dt.datetime]]:
        """Like :meth:`lock_nodes`, plus when each was last judged (never judged: left out)."""
        ...

    async def nodes_in_site(self, site: str) -> list[str]:
        """Ids of the registered nodes of a site, in order."""
        ...

    async def heads(self, node_ids: Iterable[str]) -> dict[Key, Head]:
        """(node, source) -> the stored report's sequence, time, readability and digest."""
        ...

    async def observations(self, node_ids: Iterable[str]) -> Observations:
        """The latest stored report per source of each node (nodes without any: left out)."""
        ...

    async def save_observations(self, rows: Sequence[tuple[str, Observation]]) -> None:
        """Insert or replace each (node, source)'s stored report, with its content digest."""
        ...

    async def touch_observations(self, rows: Sequence[tuple[str, Observation]]) -> None:
        """Move stored reports whose versions are unchanged: sequence, times and readability
        only (rows that do not exist are left alone)."""
        ...

    async def append_history(self, rows: Sequence[HistoryRow]) -> None:
        """Append version changes."""
        ...

    async def drift(self, node_ids: Iterable[str]) -> dict[str, DriftRow]:
        """The stored drift sets among ``node_ids`` (never judged: left out)."""
        ...

    async def save_drift(self, rows: Mapping[str, DriftRow]) -> None:
        """Insert or replace drift sets."""
        ...

    async def pins(self) -> list[Pin]:
        """Every current pin (the newest per site and scope)."""
        ...

    async def save_pin(self, pin: Pin, scope_key: str, event_id: uuid.UUID) -> bool:
        """Keep ``pin`` (and its stack, by hash) unless a pin at the same or a later stream
        sequence (``Pin.sequence``) holds its (site, scope); True when it was kept."""
        ...

    async def rollout_facts(self, node_ids: Iterable[str]) -> dict[str, RolloutFacts]:
        """Active wave (the one joined latest in the stream) and recorded steps per node
        (nodes with neither: left out)."""
        ...


class RolloutStore(Protocol):
    """The rollout facts the inventory records from the updater's and planner's events."""

    async def start_wave(
        self, rollout_id: str, wave: int, node_ids: Sequence[str], sequence: int
    ) -> list[str]:
        """Mark the wave's nodes active, ``sequence`` being the stream sequence of the
        wave.planned; returns them (none when the wave or its rollout has already ended: a
        late or retried wave.planned; not a node that a wave.planned later in the stream put
        in another wave of the rollout)."""
        ...

    async def end_wave(self, rollout_id: str, wave: int) -> list[str]:
        """The wave's nodes leave it, for good; returns them."""
        ...

    async def end_rollout(self, rollout_id: str) -> list[str]:
        """Every node of the rollout leaves its wave, for good; returns them."""
        ...

    async def record_change(
        self, node_id: str, component: str, version: str, rollout_id: str, sequence: int
    ) -> bool:
        """Remember the version a rollout step left (``sequence``: the stream sequence of its
        event); True unless a step later in the stream is recorded."""
        ...


class InventoryStore(NodeStore, RolloutStore, Protocol):
    """Everything the handlers reach."""


class InventoryTx(InventoryStore, Protocol):
    """A handler's unit of work (``lockstep_common.stores.UnitOfWork``): the store in the
    consumer's transaction, where its events go, and where the broker stored each event it
    delivered (``stream_seq``: "newest wins" decisions follow the stream, never the sender's
    clock)."""

    @property
    def events(self) -> EventSink:
        """Events emitted here are written to the outbox in this transaction."""
        ...

    def stream_seq(self, env: Envelope[EventData]) -> int:
        """The stream sequence JetStream gave ``env`` (``HandlerContext.stream_seq``)."""
        ...
