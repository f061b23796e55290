"""A work item's steps in the in-memory updater store (as ``adapters/step_rows.py``): claims,
leases, the guard's facts, progress and step moves.
"""

from __future__ import annotations

import copy
from datetime import datetime, timedelta
from typing import Any

from lockstep_common.testing import RecordedEvents
from lockstep_updater.domain.guard import Facts
from lockstep_updater.domain.steps import (
    OUT_OF_SERVICE,
    TERMINAL,
    NodeStep,
    runs_on,
    transition,
)
from lockstep_updater.domain.windows import Declared
from lockstep_updater.store import (
    REMEDY,
    UPDATE,
    Claim,
    StepRecord,
)
from lockstep_updater.testing.memory_tables import (
    FAILURES,
    Item,
    Tables,
    claim_order,
)


class MemorySteps:
    """Claims, leases, the guard's facts and step moves, in ``tables``."""

    __slots__ = ()
    tables: Tables
    events: RecordedEvents
    now: datetime

    def _free(self, item: Item) -> bool:
        return item.state not in TERMINAL and (
            item.lease_until is None or item.lease_until <= self.now
        )

    def _claim_of(self, item: Item) -> Claim:
        return Claim(
            item.id,
            item.rollout_id,
            item.wave,
            item.node_id,
            item.state,
            item.lease_token,
            item.attempts,
            item.components,
            copy.deepcopy(item.progress),
            item.correlation_id,
            item.kind,
        )

    async def claim(self, lease_s: float) -> Claim | None:
        free = sorted(
            (i for i in self.tables.items.values() if self._free(i)),
            key=claim_order,
        )
        if not free:
            return None
        item = free[0]
        if item.state is NodeStep.PENDING:
            item.state = transition(item.state, NodeStep.PREFLIGHT)
        item.attempts += 1
        item.lease_token += 1
        item.lease_until = self.now + timedelta(seconds=lease_s)
        item.claimed_at = self.now
        item.parked = False
        return self._claim_of(item)

    async def step_now(self, claim: Claim) -> NodeStep:
        return self.tables.items[claim.id].state

    async def holds_node_out(self, node_id: str) -> bool:
        items = [i for _, i in sorted(self.tables.items.items()) if i.node_id == node_id]
        latest_quarantined = bool(items) and items[-1].state is NodeStep.QUARANTINED
        return latest_quarantined or any(i.state not in TERMINAL for i in items)

    async def claim_orphan(
        self, idle_s: float, lease_s: float, states: frozenset[NodeStep]
    ) -> Claim | None:
        since = self.now - timedelta(seconds=idle_s)
        for _, item in sorted(self.tables.items.items()):
            idle = item.lease_until or item.released_at or item.claimed_at
            if item.state in states - TERMINAL and idle is not None and idle <= since:
                item.lease_token += 1
                item.lease_until = self.now + timedelta(seconds=lease_s)
                item.claimed_at = self.now
                return self._claim_of(item)
        return None

    async def still_holds(self, claim: Claim, lease_s: float) -> bool:
        item = self.tables.items[claim.id]
        if item.lease_token != claim.token or item.state in TERMINAL:
            return False
        item.lease_until = self.now + timedelta(seconds=lease_s)
        return True

    async def maintenance(self, pool: str, site: str) -> list[Declared]:
        return [
            Declared(scope, name, timezone, windows)
            for (scope, name), (timezone, windows, _) in self.tables.windows.items()
            if windows is not None and (scope, name) in {("pool", pool), ("site", site)}
        ]

    async def record_maintenance(
        self, scope: str, name: str, timezone: str, windows: tuple[str, ...] | None, at: datetime
    ) -> bool:
        held = self.tables.windows.get((scope, name))
        if held is not None and held[2] >= at:
            return False
        self.tables.windows[(scope, name)] = (timezone, windows, at)
        return True

    async def facts(self, claim: Claim, pool: str) -> Facts:
        wave = self.tables.waves.get((claim.rollout_id, claim.wave))
        found = self.tables.plans.get(claim.rollout_id)
        plan = None if found is None else found[1]
        item = self.tables.items[claim.id]
        item.pool = pool
        siblings = [
            i
            for i in self.tables.items.values()
            if i.rollout_id == claim.rollout_id and i.wave == claim.wave and i.kind == UPDATE
        ]
        others_out = sum(
            1
            for i in self.tables.items.values()
            if i.id != claim.id and i.pool == pool and i.state in OUT_OF_SERVICE
        )
        busy = next(
            (
                i.rollout_id
                for i in self.tables.items.values()
                if i.node_id == claim.node_id
                and i.id != claim.id
                and i.kind == REMEDY
                and i.state in OUT_OF_SERVICE
            ),
            None,
        )
        return Facts(
            node_id=claim.node_id,
            busy_with=None if busy is None else f"GSP remedy {busy}",
            halted=self.tables.halted.get(claim.rollout_id),
            wave_released=wave is not None,
            in_wave=wave is not None and claim.node_id in wave.node_ids,
            in_plan=None if plan is None else claim.node_id in plan,
            failures=sum(1 for i in siblings if i.state in FAILURES),
            failure_budget=wave.failure_budget if wave else 0,
            pool=pool,
            others_out=others_out,
            max_unavailable=wave.max_unavailable if wave else 0,
            wave=claim.wave,
            approved_wave=self.tables.plan_waves.get(claim.rollout_id, {}).get(claim.node_id),
        )

    async def save_progress(self, claim: Claim, progress: dict[str, Any]) -> None:
        self.tables.items[claim.id].progress = copy.deepcopy(progress)

    def _wake_parked(self, pool: str) -> None:
        items = self.tables.items.values()
        parked = sorted((i for i in items if i.parked and i.pool == pool), key=claim_order)
        limit = max(
            (
                w.max_unavailable
                for i in parked
                if (w := self.tables.waves.get((i.rollout_id, i.wave))) is not None
            ),
            default=1,
        )
        out = sum(1 for i in items if i.pool == pool and i.state in OUT_OF_SERVICE)
        for waiting in parked[: max(1, limit - out)]:
            waiting.parked, waiting.lease_until = False, self.now

    async def wake_halted(self) -> int:
        halted = [
            i for i in self.tables.items.values() if i.parked and i.rollout_id in self.tables.halted
        ]
        for item in halted:
            item.parked, item.lease_until = False, self.now
        return len(halted)

    async def parked_pools(self) -> list[str]:
        return sorted({i.pool for i in self.tables.items.values() if i.parked})

    async def wake_parked(self, pool: str) -> int:
        before = sum(1 for i in self.tables.items.values() if i.parked and i.pool == pool)
        self._wake_parked(pool)
        return before - sum(1 for i in self.tables.items.values() if i.parked and i.pool == pool)

    async def advance(
        self,
        claim: Claim,
        target: NodeStep,
        *,
        reason: str = "",
        progress: dict[str, Any] | None = None,
        retry_in_s: float = 0.0,
        parked: bool = False,
        keep_lease_s: float | None = None,
    ) -> Claim | None:
        item = self.tables.items[claim.id]
        before = item.state
        claimed_at = item.claimed_at
        item.state = transition(item.state, target)
        item.lease_token += 1  # released: the claim that ended the step holds nothing more
        item.reason = reason
        if progress is not None:
            item.progress = copy.deepcopy(progress)
        item.lease_until = self.now + timedelta(seconds=retry_in_s) if retry_in_s else None
        item.updated_at = self.now
        item.released_at = self.now
        item.parked = parked
        if before in OUT_OF_SERVICE and item.state not in OUT_OF_SERVICE and item.pool:
            self._wake_parked(item.pool)
        record = StepRecord(
            claim.rollout_id,
            claim.wave,
            before.value,
            claim.attempts,
            claim.token,
            claimed_at or self.now,
            self.now,
            target.value,
            reason,
        )
        self.tables.steps.append((claim.node_id, record))
        if keep_lease_s is None or retry_in_s or parked or not runs_on(before, item.state):
            return None
        item.attempts += 1
        item.lease_until = self.now + timedelta(seconds=keep_lease_s)
        item.claimed_at = self.now
        return self._claim_of(item)
