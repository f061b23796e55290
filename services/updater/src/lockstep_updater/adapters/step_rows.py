"""A work item's steps in the updater's store: claims and orphan claims, the fencing lease,
the guard's facts read under the pool's lock, maintenance windows, progress, and the move to
the next step with its history row (checked by ``domain.steps.transition``).
"""

from __future__ import annotations

import contextlib
import json
from datetime import datetime
from typing import Any

import asyncpg

from lockstep_common.db import Conn
from lockstep_common.outbox import EventSink
from lockstep_common.transitions import InvalidTransition
from lockstep_updater.adapters.work_sql import (
    ADVANCE,
    CLAIM,
    CLAIM_COLUMNS,
    GUARD_FACTS,
    WAKE_PARKED,
    claim_of_row,
    sql_list,
)
from lockstep_updater.domain.guard import Facts
from lockstep_updater.domain.steps import (
    OUT_OF_SERVICE,
    TERMINAL,
    NodeStep,
    runs_on,
    transition,
)
from lockstep_updater.domain.windows import Declared
from lockstep_updater.store import Claim


class StepRows:
    """Claims, leases, the guard's facts and step moves, on ``conn``."""

    __slots__ = ()
    conn: Conn
    events: EventSink

    async def claim(self, lease_s: float) -> Claim | None:
        claimed = await self.conn.fetchrow(CLAIM, lease_s)
        return None if claimed is None else claim_of_row(claimed)

    async def step_now(self, claim: Claim) -> NodeStep:
        state = await self.conn.fetchval(
            "SELECT state FROM node_work WHERE id = $1 FOR UPDATE", claim.id
        )
        return NodeStep(state)

    async def holds_node_out(self, node_id: str) -> bool:
        rows = await self.conn.fetch(
            "SELECT state FROM node_work WHERE node_id = $1 ORDER BY id DESC FOR UPDATE",
            node_id,
        )
        states = [NodeStep(r["state"]) for r in rows]
        latest_quarantined = bool(states) and states[0] is NodeStep.QUARANTINED
        return latest_quarantined or any(s not in TERMINAL for s in states)

    async def claim_orphan(
        self, idle_s: float, lease_s: float, states: frozenset[NodeStep]
    ) -> Claim | None:
        row = await self.conn.fetchrow(
            "SELECT id FROM node_work WHERE state = ANY($1::text[])"
            " AND COALESCE(lease_until, updated_at) <= now() - make_interval(secs => $2)"
            " ORDER BY id FOR UPDATE SKIP LOCKED LIMIT 1",
            sorted(s.value for s in states - TERMINAL),
            idle_s,
        )
        if row is None:
            return None
        claimed = await self.conn.fetchrow(
            "UPDATE node_work SET lease_token = lease_token + 1, claimed_at = now(),"
            " updated_at = now(), lease_until = now() + make_interval(secs => $2) WHERE id = $1"
            f" RETURNING {CLAIM_COLUMNS}",
            row["id"],
            lease_s,
        )
        assert claimed is not None  # noqa: S101 - the row is locked by the SELECT above
        return claim_of_row(claimed)

    async def still_holds(self, claim: Claim, lease_s: float) -> bool:
        # One statement: the row is locked (and the lease renewed) only if the claim holds it.
        held = await self.conn.fetchval(
            "UPDATE node_work SET lease_until = now() + make_interval(secs => $3)"
            f" WHERE id = $1 AND lease_token = $2 AND state NOT IN ({sql_list(TERMINAL)})"
            " RETURNING true",
            claim.id,
            claim.token,
            lease_s,
        )
        return bool(held)

    async def facts(self, claim: Claim, pool: str) -> Facts:
        # One pool at a time: the budget read and the move that spends it commit together.
        await self.conn.execute(
            "SELECT pg_advisory_xact_lock(hashtext('updater-pool:' || $1))", pool
        )
        # One round trip for the rest (the item's pool recorded with it), and membership asked
        # of the server, not read as lists: a wave and a plan may name 12,500 nodes, and this
        # runs before every action. The lock is a statement of its own: what is read after it
        # must see what the pool's last holder committed (READ COMMITTED takes a statement's
        # snapshot when it starts, PostgreSQL manual 13.2.1).
        row = await self.conn.fetchrow(
            GUARD_FACTS, claim.rollout_id, claim.wave, claim.node_id, pool, claim.id
        )
        assert row is not None  # noqa: S101 - a SELECT without FROM always returns a row
        has_wave, has_plan = row["max_unavailable"] is not None, row["has_plan"]
        busy = row["busy"]
        return Facts(
            node_id=claim.node_id,
            busy_with=None if busy is None else f"GSP remedy {busy}",
            halted=row["halted"],
            wave_released=has_wave,
            in_wave=bool(row["in_wave"]),
            in_plan=bool(row["in_plan"]) if has_plan else None,
            failures=row["failures"],
            failure_budget=row["failure_budget"] if has_wave else 0,
            pool=pool,
            others_out=row["others_out"],
            max_unavailable=row["max_unavailable"] if has_wave else 0,
            wave=claim.wave,
            approved_wave=row["approved_wave"] if has_plan else None,
        )

    async def maintenance(self, pool: str, site: str) -> list[Declared]:
        rows = await self.conn.fetch(
            "SELECT scope, name, timezone, windows FROM maintenance_windows"
            " WHERE windows IS NOT NULL AND ((scope = 'pool' AND name = $1)"
            " OR (scope = 'site' AND name = $2))",
            pool,
            site,
        )
        return [Declared(r["scope"], r["name"], r["timezone"], tuple(r["windows"])) for r in rows]

    async def record_maintenance(
        self, scope: str, name: str, timezone: str, windows: tuple[str, ...] | None, at: datetime
    ) -> bool:
        kept = await self.conn.fetchval(
            "INSERT INTO maintenance_windows (scope, name, timezone, windows, set_at)"
            " VALUES ($1, $2, $3, $4, $5) ON CONFLICT (scope, name) DO UPDATE SET"
            " timezone = $3, windows = $4, set_at = $5"
            " WHERE maintenance_windows.set_at < $5 RETURNING 1",
            scope,
            name,
            timezone,
            None if windows is None else list(windows),
            at,
        )
        return kept is not None

    async def save_progress(self, claim: Claim, progress: dict[str, Any]) -> None:
        await self.conn.execute(
            "UPDATE node_work SET progress = $2, updated_at = now() WHERE id = $1",
            claim.id,
            json.dumps(progress),
        )

    async def wake_halted(self) -> int:
        woke = await self.conn.fetchval(
            "WITH woke AS (UPDATE node_work SET parked = false, lease_until = now()"
            " WHERE parked AND rollout_id IN (SELECT rollout_id FROM halts) RETURNING 1)"
            " SELECT count(*) FROM woke"
        )
        return int(woke)

    async def parked_pools(self) -> list[str]:
        rows = await self.conn.fetch(
            "SELECT DISTINCT pool FROM node_work WHERE parked ORDER BY pool"
        )
        return [r["pool"] for r in rows]

    async def wake_parked(self, pool: str) -> int:
        await self.conn.execute(
            "SELECT pg_advisory_xact_lock(hashtext('updater-pool:' || $1))", pool
        )
        status = await self.conn.execute(WAKE_PARKED, pool)  # "UPDATE <count>"
        return int(status.rsplit(" ", 1)[-1])

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
        document = None if progress is None else json.dumps(progress)

        async def move(before: NodeStep) -> tuple[NodeStep, bool, asyncpg.Record | None]:
            state = transition(before, target)
            keep = keep_lease_s is not None and not retry_in_s and not parked
            keep = keep and runs_on(before, state)
            row = await self.conn.fetchrow(
                ADVANCE, claim.id, state.value, reason, document, retry_in_s, parked, keep,
                keep_lease_s or 0.0, before.value, claim.attempts, claim.token,
            )  # fmt: skip
            return state, keep, row

        # One round trip where the item is in the claim's step, as it is under the fence;
        # otherwise the move is checked from the step stored (``transition`` refuses it).
        before, row = claim.state, None
        with contextlib.suppress(InvalidTransition):
            state, keep, row = await move(before)
        if row is None:
            before = NodeStep(
                await self.conn.fetchval(
                    "SELECT state FROM node_work WHERE id = $1 FOR UPDATE", claim.id
                )
            )
            state, keep, row = await move(before)
        assert row is not None  # noqa: S101 - the row is locked in this transaction
        if before in OUT_OF_SERVICE and state not in OUT_OF_SERVICE and row["was_pool"]:
            # A place in the pool's budget freed. Under the pool's lock (as ``facts``), so
            # that two wakes never lock the parked rows in different orders.
            await self.conn.execute(
                "SELECT pg_advisory_xact_lock(hashtext('updater-pool:' || $1))", row["was_pool"]
            )
            await self.conn.execute(WAKE_PARKED, row["was_pool"])
        return claim_of_row(row) if keep else None
