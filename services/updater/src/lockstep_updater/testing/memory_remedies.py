"""GSP remedies in the in-memory updater store (as ``adapters/remedy_rows.py``)."""

from __future__ import annotations

import copy
from datetime import datetime
from typing import Any

from lockstep_common.testing import RecordedEvents
from lockstep_updater.domain.guard import RemedyFacts
from lockstep_updater.domain.steps import (
    OUT_OF_SERVICE,
    TERMINAL,
    NodeStep,
    transition,
)
from lockstep_updater.store import (
    REMEDY,
    Claim,
)
from lockstep_updater.testing.memory_tables import (
    HELD,
    Item,
    Tables,
)


class MemoryRemedies:
    """A node's remedy items and their guard's facts, in ``tables``."""

    __slots__ = ()
    tables: Tables
    events: RecordedEvents
    now: datetime

    async def record_remedy(
        self,
        node_id: str,
        remedy_id: str,
        *,
        held: bool,
        progress: dict[str, Any],
        correlation_id: str | None,
    ) -> bool:
        ended_well = {NodeStep.DONE, NodeStep.CANCELLED}
        for item in self.tables.items.values():
            if (item.node_id, item.kind) == (node_id, REMEDY) and item.state not in ended_well:
                return False
            if (item.rollout_id, item.node_id, item.kind) == (remedy_id, node_id, REMEDY):
                return False
        item_id = max(self.tables.items, default=0) + 1
        self.tables.items[item_id] = Item(
            item_id,
            remedy_id,
            0,
            node_id,
            ("driver",),
            correlation_id,
            updated_at=self.now,
            kind=REMEDY,
            progress=copy.deepcopy(progress),
            lease_until=HELD if held else None,
        )
        return True

    def _held_remedy(self, node_id: str) -> Item | None:
        """The node's remedy held for approval, if any."""
        held = (node_id, REMEDY, NodeStep.PENDING, HELD)
        return next(
            (
                item
                for item in self.tables.items.values()
                if (item.node_id, item.kind, item.state, item.lease_until) == held
            ),
            None,
        )

    async def approve_remedy(self, node_id: str) -> bool:
        item = self._held_remedy(node_id)
        if item is None:
            return False
        item.lease_until = None
        item.updated_at = self.now
        return True

    async def withdraw_remedy(
        self, node_id: str, reason: str, *, unless_pin: str | None = None
    ) -> bool:
        item = self._held_remedy(node_id)
        if item is None or (unless_pin is not None and item.progress.get("pin") == unless_pin):
            return False
        item.state = transition(item.state, NodeStep.CANCELLED)
        item.reason, item.lease_until, item.updated_at = reason, None, self.now
        return True

    async def remedy_facts(self, claim: Claim, pool: str) -> RemedyFacts:
        self.tables.items[claim.id].pool = pool
        others = self.tables.items.values()
        in_rollout = next(
            (
                i.rollout_id
                for _, i in sorted(self.tables.items.items())
                if i.node_id == claim.node_id and i.kind != REMEDY and i.state not in TERMINAL
            ),
            None,
        )
        out = [
            i for i in others if i.id != claim.id and i.pool == pool and i.state in OUT_OF_SERVICE
        ]
        return RemedyFacts(
            node_id=claim.node_id,
            pool=pool,
            in_rollout=in_rollout,
            others_out=len(out),
            remedies_out=sum(1 for i in out if i.kind == REMEDY),
        )
