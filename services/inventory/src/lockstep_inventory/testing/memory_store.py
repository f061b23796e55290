"""``MemoryInventoryStore``: both storage Protocols (``store.NodeStore``, ``store.RolloutStore``)
in dictionaries, with the semantics of ``adapters/pg_store.PgInventoryStore``.

Locking is a no-op (one task at a time in a unit test); everything else behaves as the SQL does:
a pin is kept only when later in the stream than the one holding its (site, scope), a rollout
step or wave membership likewise, a wave or rollout that has ended stays ended, a touched report
keeps its content and digest. ``tests/integration/inventory/test_store_contract.py`` runs the
same assertions against this class and PostgreSQL.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence

from lockstep_common.vocabulary import Component
from lockstep_inventory.domain.evaluate import RolloutFacts
from lockstep_inventory.domain.fleet_file import NodeEntry
from lockstep_inventory.domain.ingestion import DriftRow, Head, HistoryRow, Key, Observations
from lockstep_inventory.domain.observation import Observation, content_digest
from lockstep_inventory.domain.pins import Pin

WHOLE_ROLLOUT = -1  # the wave number that marks a whole rollout ended (as ended_waves does)


@dataclasses.dataclass(frozen=True, slots=True)
class _Membership:
    wave: int
    sequence: int


@dataclasses.dataclass(frozen=True, slots=True)
class _Step:
    version: str
    rollout_id: str
    sequence: int


class MemoryInventoryStore:
    """The inventory's state in memory; ``register`` plays ``lockstep fleet import``.

    Its attributes are the tables, for tests to inspect (``history`` in append order).
    """

    def __init__(self, nodes: Iterable[NodeEntry] = ()) -> None:
        self.nodes: dict[str, NodeEntry] = {}
        self.reports: dict[Key, tuple[Observation, str]] = {}  # with the content digest
        self.history: list[HistoryRow] = []
        self.drift_rows: dict[str, DriftRow] = {}
        self.current_pins: dict[tuple[str, str], Pin] = {}  # (site, scope key) -> pin
        self.stacks: dict[str, Mapping[str, Mapping[Component, str]]] = {}
        self.waves: dict[tuple[str, str], _Membership] = {}  # (rollout, node)
        self.ended: set[tuple[str, int]] = set()  # (rollout, wave or WHOLE_ROLLOUT)
        self.steps: dict[tuple[str, Component], _Step] = {}  # (node, component)
        self.register(nodes)

    def register(self, nodes: Iterable[NodeEntry]) -> None:
        """Add or replace registry rows."""
        self.nodes.update((n.id, n) for n in nodes)

    # --- NodeStore ------------------------------------------------------------------------

    async def lock_nodes(self, node_ids: Iterable[str]) -> dict[str, NodeEntry]:
        return {n: self.nodes[n] for n in sorted(set(node_ids)) if n in self.nodes}

    async def lock_nodes_judged(
        self, node_ids: Iterable[str]
    ) -> tuple[dict[str, NodeEntry], dict[str, dt.datetime]]:
        nodes = await self.lock_nodes(node_ids)
        judged = {n: self.drift_rows[n].evaluated_at for n in nodes if n in self.drift_rows}
        return nodes, judged

    async def nodes_in_site(self, site: str) -> list[str]:
        return sorted(n.id for n in self.nodes.values() if n.site == site)

    async def heads(self, node_ids: Iterable[str]) -> dict[Key, Head]:
        wanted = set(node_ids)
        return {
            key: Head(o.source, o.sequence, o.observed_at, o.readable, digest)
            for key, (o, digest) in self.reports.items()
            if key[0] in wanted
        }

    async def observations(self, node_ids: Iterable[str]) -> Observations:
        wanted = set(node_ids)
        out: Observations = {}
        for (node_id, source), (o, _) in self.reports.items():
            if node_id in wanted:
                out.setdefault(node_id, {})[source] = o
        return out

    async def save_observations(self, rows: Sequence[tuple[str, Observation]]) -> None:
        for node_id, o in rows:
            self.reports[(node_id, o.source)] = (o, content_digest(o))

    async def touch_observations(self, rows: Sequence[tuple[str, Observation]]) -> None:
        for node_id, o in rows:
            key = (node_id, o.source)
            if key not in self.reports:
                continue  # as an UPDATE of a missing row: nothing
            stored, digest = self.reports[key]
            moved = dataclasses.replace(
                stored,
                sequence=o.sequence,
                observed_at=o.observed_at,
                readable=o.readable,
                error=o.error,
                unreadable_since=o.unreadable_since,
            )
            self.reports[key] = (moved, digest)

    async def append_history(self, rows: Sequence[HistoryRow]) -> None:
        self.history.extend(rows)

    async def drift(self, node_ids: Iterable[str]) -> dict[str, DriftRow]:
        return {n: self.drift_rows[n] for n in set(node_ids) if n in self.drift_rows}

    async def save_drift(self, rows: Mapping[str, DriftRow]) -> None:
        self.drift_rows.update(rows)

    async def pins(self) -> list[Pin]:
        return list(self.current_pins.values())

    async def save_pin(self, pin: Pin, scope_key: str, event_id: uuid.UUID) -> bool:
        self.stacks.setdefault(pin.stack_hash, pin.stack)
        key = (pin.site, scope_key)
        held = self.current_pins.get(key)
        if held is not None and not held.sequence < pin.sequence:
            return False
        self.current_pins[key] = pin
        return True

    async def rollout_facts(self, node_ids: Iterable[str]) -> dict[str, RolloutFacts]:
        wanted = set(node_ids)
        latest: dict[str, tuple[int, str]] = {}
        for (rollout_id, node_id), member in self.waves.items():
            if node_id in wanted and (
                node_id not in latest or member.sequence > latest[node_id][0]
            ):
                latest[node_id] = (member.sequence, rollout_id)
        recorded: dict[str, dict[Component, str]] = {}
        for (node_id, component), step in self.steps.items():
            if node_id in wanted:
                recorded.setdefault(node_id, {})[component] = step.version
        return {
            n: RolloutFacts(latest[n][1] if n in latest else None, recorded.get(n, {}))
            for n in set(latest) | set(recorded)
        }

    # --- RolloutStore ---------------------------------------------------------------------

    async def start_wave(
        self, rollout_id: str, wave: int, node_ids: Sequence[str], sequence: int
    ) -> list[str]:
        if {(rollout_id, wave), (rollout_id, WHOLE_ROLLOUT)} & self.ended:
            return []  # a late or retried wave.planned does not reopen an ended wave
        started = []
        for node_id in dict.fromkeys(node_ids):
            held = self.waves.get((rollout_id, node_id))
            if held is None or held.sequence < sequence:
                self.waves[(rollout_id, node_id)] = _Membership(wave, sequence)
                started.append(node_id)
        return sorted(started)

    async def end_wave(self, rollout_id: str, wave: int) -> list[str]:
        self.ended.add((rollout_id, wave))
        return self._leave(lambda r, w: r == rollout_id and w == wave)

    async def end_rollout(self, rollout_id: str) -> list[str]:
        self.ended.add((rollout_id, WHOLE_ROLLOUT))
        return self._leave(lambda r, _: r == rollout_id)

    def _leave(self, leaves: Callable[[str, int], bool]) -> list[str]:
        gone = [key for key, m in self.waves.items() if leaves(key[0], m.wave)]
        for key in gone:
            del self.waves[key]
        return [node_id for _, node_id in gone]

    async def record_change(
        self, node_id: str, component: str, version: str, rollout_id: str, sequence: int
    ) -> bool:
        key = (node_id, Component(component))
        held = self.steps.get(key)
        if held is not None and not held.sequence < sequence:
            return False  # a step earlier in the stream arriving late
        self.steps[key] = _Step(version, rollout_id, sequence)
        return True
