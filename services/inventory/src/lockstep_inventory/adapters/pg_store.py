"""The inventory's stores (``store.NodeStore``, ``store.RolloutStore``) over one PostgreSQL
connection: each method is the batched statement of ``state`` or ``rollouts``, run in the
connection's current transaction."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterable, Mapping, Sequence

from lockstep_common.consumer import HandlerContext
from lockstep_common.db import Conn
from lockstep_common.envelope import Envelope, EventData
from lockstep_common.outbox import EventSink
from lockstep_common.stores import JoinedAt
from lockstep_inventory.adapters import rollouts, state
from lockstep_inventory.domain.evaluate import RolloutFacts
from lockstep_inventory.domain.fleet_file import NodeEntry
from lockstep_inventory.domain.ingestion import DriftRow, Head, HistoryRow, Key, Observations
from lockstep_inventory.domain.observation import Observation
from lockstep_inventory.domain.pins import Pin


class PgInventoryStore:
    """Node state and rollout facts in the inventory's schema, through ``conn``."""

    __slots__ = ("conn",)

    def __init__(self, conn: Conn) -> None:
        self.conn = conn

    async def lock_nodes(self, node_ids: Iterable[str]) -> dict[str, NodeEntry]:
        return await state.lock_nodes(self.conn, node_ids)

    async def lock_nodes_judged(
        self, node_ids: Iterable[str]
    ) -> tuple[dict[str, NodeEntry], dict[str, dt.datetime]]:
        return await state.lock_nodes_judged(self.conn, node_ids)

    async def nodes_in_site(self, site: str) -> list[str]:
        return await state.nodes_in_site(self.conn, site)

    async def heads(self, node_ids: Iterable[str]) -> dict[Key, Head]:
        return await state.heads(self.conn, node_ids)

    async def observations(self, node_ids: Iterable[str]) -> Observations:
        return await state.observations(self.conn, node_ids)

    async def save_observations(self, rows: Sequence[tuple[str, Observation]]) -> None:
        await state.save_observations(self.conn, rows)

    async def touch_observations(self, rows: Sequence[tuple[str, Observation]]) -> None:
        await state.touch_observations(self.conn, rows)

    async def append_history(self, rows: Sequence[HistoryRow]) -> None:
        await state.append_history(self.conn, rows)

    async def drift(self, node_ids: Iterable[str]) -> dict[str, DriftRow]:
        return await state.drift(self.conn, node_ids)

    async def save_drift(self, rows: Mapping[str, DriftRow]) -> None:
        await state.save_drift(self.conn, rows)

    async def pins(self) -> list[Pin]:
        return await state.pins(self.conn)

    async def save_pin(self, pin: Pin, scope_key: str, event_id: uuid.UUID) -> bool:
        return await state.save_pin(self.conn, pin, scope_key, event_id)

    async def rollout_facts(self, node_ids: Iterable[str]) -> dict[str, RolloutFacts]:
        return await state.rollout_facts(self.conn, node_ids)

    async def start_wave(
        self, rollout_id: str, wave: int, node_ids: Sequence[str], sequence: int
    ) -> list[str]:
        return await rollouts.start_wave(self.conn, rollout_id, wave, node_ids, sequence)

    async def end_wave(self, rollout_id: str, wave: int) -> list[str]:
        return await rollouts.end_wave(self.conn, rollout_id, wave)

    async def end_rollout(self, rollout_id: str) -> list[str]:
        return await rollouts.end_rollout(self.conn, rollout_id)

    async def record_change(
        self, node_id: str, component: str, version: str, rollout_id: str, sequence: int
    ) -> bool:
        return await rollouts.record_change(
            self.conn, node_id, component, version, rollout_id, sequence
        )


class PgInventoryTx(PgInventoryStore):
    """``store.InventoryTx`` in the consumer runtime's transaction: its context is the event
    sink (inbox claim, state and outbox commit together) and knows each event's stream
    sequence."""

    __slots__ = ("_ctx",)

    def __init__(self, conn: Conn, ctx: HandlerContext) -> None:
        super().__init__(conn)
        self._ctx = ctx

    @property
    def events(self) -> EventSink:
        return self._ctx

    def stream_seq(self, env: Envelope[EventData]) -> int:
        return self._ctx.stream_seq(env)


joined = JoinedAt(PgInventoryTx)
"""``joined(handler)`` / ``joined.batch(handler)``: ``handler`` run in the consumer runtime's
transaction on a ``PgInventoryTx``, with ``now`` from the system clock."""
