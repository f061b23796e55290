"""A work item's steps in the updater's store: claims and orphan claims, the fencing lease,
the guard's facts read under the pool's lock, maintenance windows, progress, and the move to
the next step with its history row (checked by ``domain.steps.transition``).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from lockstep_common.db import Conn
from lockstep_common.outbox import EventSink
from lockstep_updater.adapters.work_sql import (
    CLAIM_COLUMNS,
    CLAIMABLE,
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
        row = await self.conn.fetchrow(CLAIMABLE)
        if row is None:
            return None
        state = NodeStep(row["state"])
        if state is NodeStep.PENDING:
            state = transition(state, NodeStep.PREFLIGHT)
        claimed = await self.conn.fetchrow(
            "UPDATE node_work SET state = $2, attempts = attempts + 1, parked = false,"
            " lease_token = lease_token + 1, claimed_at = now(), updated_at = now(),"
            " lease_until = now() + make_interval(secs => $3) WHERE id = $1"
            f" RETURNING {CLAIM_COLUMNS}",
            row["id"],
            state.value,
            lease_s,
        )
        assert claimed is not None  # noqa: S101 - the row is locked by the SELECT above
        return claim_of_row(claimed)

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
        await self.conn.execute("UPDATE node_work SET pool = $2 WHERE id = $1", claim.id, pool)
        # One round trip for the rest, and membership asked of the server, not read as lists:
        # a wave and a plan may name 12,500 nodes, and this runs before every action.
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
        row = await self.conn.fetchrow(
            "SELECT state, claimed_at, pool FROM node_work WHERE id = $1 FOR UPDATE", claim.id
        )
        assert row is not None  # noqa: S101 - the item exists while it is claimed
        before = NodeStep(row["state"])
        state = transition(before, target)
        keep = keep_lease_s is not None and not retry_in_s and not parked and runs_on(before, state)
        kept = await self.conn.fetchrow(
            # The token moves on at the release too: the claim that ended the step holds
            # nothing any more (its still_holds is False), so it cannot act after it. Kept,
            # the item is claimed again in this write, as ``claim`` does.
            "UPDATE node_work SET state = $2, reason = $3, lease_token = lease_token + 1,"
            " progress = COALESCE($4::jsonb, progress), updated_at = now(), parked = $6,"
            " lease_until = CASE WHEN $7 THEN now() + make_interval(secs => $8)"
            " WHEN $5 > 0 THEN now() + make_interval(secs => $5) END,"
            " attempts = attempts + $7::int,"
            " claimed_at = CASE WHEN $7 THEN now() ELSE claimed_at END"
            f" WHERE id = $1 RETURNING {CLAIM_COLUMNS}",
            claim.id,
            state.value,
            reason,
            None if progress is None else json.dumps(progress),
            retry_in_s,
            parked,
            keep,
            keep_lease_s or 0.0,
        )
        if before in OUT_OF_SERVICE and state not in OUT_OF_SERVICE and row["pool"]:
            # A place in the pool's budget freed. Under the pool's lock (as ``facts``), so
            # that two wakes never lock the parked rows in different orders.
            await self.conn.execute(
                "SELECT pg_advisory_xact_lock(hashtext('updater-pool:' || $1))", row["pool"]
            )
            await self.conn.execute(WAKE_PARKED, row["pool"])
        await self.conn.execute(
            "INSERT INTO node_steps (work_id, node_id, rollout_id, wave, step, attempt, token,"
            " started_at, outcome, reason) VALUES ($1, $2, $3, $4, $5, $6, $7,"
            " COALESCE($8, now()), $9, $10)",
            claim.id,
            claim.node_id,
            claim.rollout_id,
            claim.wave,
            before.value,
            claim.attempts,
            claim.token,
            row["claimed_at"],
            state.value,
            reason,
        )
        return claim_of_row(kept) if keep and kept is not None else None
