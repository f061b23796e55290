"""A rollout's rows in the in-memory updater store (as ``adapters/rollout_rows.py``)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from lockstep_common.events.v1 import AttestedComponent, WavePlanned
from lockstep_common.testing import RecordedEvents
from lockstep_updater.domain.steps import NodeStep
from lockstep_updater.store import (
    ROLLBACK,
    UPDATE,
    Target,
)
from lockstep_updater.testing.memory_tables import (
    Item,
    Tables,
    Wave,
)


class MemoryRollouts:
    """The rollout's plan, bundle, waves and halt, in ``tables``."""

    __slots__ = ()
    tables: Tables
    events: RecordedEvents
    now: datetime

    async def record_plan(
        self,
        rollout_id: str,
        stack_hash: str,
        nodes: frozenset[str],
        waves: Mapping[str, int] | None = None,
    ) -> None:
        if rollout_id not in self.tables.plans:
            self.tables.plans[rollout_id] = (stack_hash, nodes)
            self.tables.plan_waves[rollout_id] = dict(waves or {})

    async def plan_waves(self, rollout_id: str) -> dict[str, int]:
        return dict(self.tables.plan_waves.get(rollout_id, {}))

    async def plan_nodes(self, rollout_id: str) -> frozenset[str] | None:
        plan = self.tables.plans.get(rollout_id)
        return None if plan is None else plan[1]

    async def record_bundle(
        self, stack_hash: str, bundle_uri: str | None, components: tuple[AttestedComponent, ...]
    ) -> None:
        self.tables.bundles.pop(stack_hash, None)  # the latest attested last
        self.tables.bundles[stack_hash] = (bundle_uri, components)

    async def target(self, rollout_id: str) -> Target | None:
        plan = self.tables.plans.get(rollout_id)
        if plan is None or plan[0] not in self.tables.bundles:
            return None
        uri, components = self.tables.bundles[plan[0]]
        return Target(plan[0], uri, components)

    async def attested(
        self, profile: str, component: str, version: str
    ) -> tuple[Target, AttestedComponent] | None:
        # The latest recorded last: a bundle attested again moves to the end, as attested_at.
        for stack_hash, (uri, components) in reversed(self.tables.bundles.items()):
            for entry in components:
                if (entry.profile, entry.component.value, entry.version) == (
                    profile,
                    component,
                    version,
                ):
                    return Target(stack_hash, uri, components), entry
        return None

    async def record_wave(self, wave: WavePlanned, correlation_id: str | None) -> bool:
        key = (wave.rollout_id, wave.wave)
        if key in self.tables.waves:
            return False
        self.tables.waves[key] = Wave(
            wave.node_ids,
            wave.max_unavailable,
            wave.failure_budget,
            correlation_id,
            reflash=frozenset(c.value for c in wave.reflash),
        )
        taken = {(i.rollout_id, i.node_id) for i in self.tables.items.values() if i.kind == UPDATE}
        for node_id in wave.node_ids:
            if (wave.rollout_id, node_id) in taken:
                continue  # a node appears in one wave of a rollout; the first one keeps it
            item_id = max(self.tables.items, default=0) + 1
            self.tables.items[item_id] = Item(
                item_id,
                wave.rollout_id,
                wave.wave,
                node_id,
                tuple(c.value for c in wave.components),
                correlation_id,
                updated_at=self.now,
            )
        return True

    async def reflash(self, rollout_id: str, wave: int) -> frozenset[str]:
        found = self.tables.waves.get((rollout_id, wave))
        return frozenset() if found is None else found.reflash

    async def halt(self, rollout_id: str, reason: str) -> None:
        self.tables.halted.setdefault(rollout_id, reason)

    async def request_rollbacks(self, rollout_id: str, wave: int) -> int:
        items = sorted(self.tables.items.values(), key=lambda i: i.id)
        have = {i.node_id for i in items if i.rollout_id == rollout_id and i.kind == ROLLBACK}
        added = 0
        for item in items:
            if (item.rollout_id, item.wave, item.kind) != (rollout_id, wave, UPDATE):
                continue
            if item.node_id in have:
                continue
            item_id = max(self.tables.items) + 1
            self.tables.items[item_id] = Item(
                item_id,
                rollout_id,
                wave,
                item.node_id,
                item.components,
                item.correlation_id,
                updated_at=self.now,
                kind=ROLLBACK,
            )
            added += 1
        return added

    async def update_item(
        self, rollout_id: str, node_id: str
    ) -> tuple[NodeStep, dict[str, Any]] | None:
        for item in self.tables.items.values():
            if (item.rollout_id, item.node_id, item.kind) == (rollout_id, node_id, UPDATE):
                return item.state, copy.deepcopy(item.progress)
        return None
