"""The updater store on PostgreSQL (migrations/0001_updater.sql).

``PostgresStore`` opens a transaction on a pooled connection whose events go to the outbox
(``outbox.emitting``); ``joined`` runs a handler in the consumer runtime's own transaction.
States are spelled only by ``domain.steps.NodeStep``, and every change is checked by
``domain.steps.transition`` on the state read under the row's lock. Leases compare with
PostgreSQL's clock, the one every claimer shares.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from lockstep_common import outbox
from lockstep_common.db import Conn
from lockstep_common.events.v1 import AttestedComponent, WavePlanned
from lockstep_common.outbox import EventSink
from lockstep_common.stores import Joined, PooledStore
from lockstep_updater.domain.guard import Facts, RemedyFacts
from lockstep_updater.domain.steps import (
    OUT_OF_SERVICE,
    TERMINAL,
    NodeStep,
    runs_on,
    transition,
)
from lockstep_updater.domain.windows import Declared
from lockstep_updater.store import (
    RELEASE,
    Claim,
    Completion,
    NotQuarantined,
    StepRecord,
    Target,
    WaveResult,
)


def _list(states: frozenset[NodeStep]) -> str:
    return ", ".join("'" + s.value + "'" for s in sorted(states))


# Written from the enum, not passed as parameters, so the planner sees constants and uses the
# partial index node_work_open (as attest's jobs_open, adapters/repository.py there).
_CLAIMABLE = (
    f"SELECT id, state FROM node_work WHERE state NOT IN ({_list(TERMINAL)})"
    # Free: no lease, or its end passed (updated_at is never in the future); written as the
    # ready time so that the index in claim order (migration 0008) serves it.
    " AND COALESCE(lease_until, updated_at) <= now()"
    # Longest ready first (since its lease ended, its retry pause ended or its step was
    # committed): a node polling its drain must not starve the nodes behind it.
    " ORDER BY COALESCE(lease_until, updated_at), id FOR UPDATE SKIP LOCKED LIMIT 1"
)
_OUT = _list(OUT_OF_SERVICE)
_TERMINAL_NAMES = frozenset(s.value for s in TERMINAL)
_FAILED = _list(frozenset({NodeStep.FAILED, NodeStep.QUARANTINED}))
# The guard's facts (domain.guard.Facts) of item $5, node $3 of wave $2 of rollout $1, pool $4.
_FACTS = (
    "SELECT w.in_wave, w.max_unavailable, w.failure_budget,"
    " p.rollout_id IS NOT NULL AS has_plan, p.in_plan, p.approved_wave,"
    " (SELECT reason FROM halts WHERE rollout_id = $1) AS halted,"
    " (SELECT count(*) FROM node_work WHERE rollout_id = $1 AND wave = $2"
    f"  AND kind = 'update' AND state IN ({_FAILED})) AS failures,"
    " (SELECT count(*) FROM node_work WHERE pool = $4 AND id <> $5"
    f"  AND state IN ({_OUT})) AS others_out,"
    " (SELECT rollout_id FROM node_work WHERE node_id = $3 AND id <> $5 AND kind = 'remedy'"
    f"  AND state IN ({_OUT}) LIMIT 1) AS busy"
    " FROM (SELECT 1) AS one"
    " LEFT JOIN LATERAL (SELECT $3 = ANY(node_ids) AS in_wave, max_unavailable,"
    "  failure_budget FROM waves WHERE rollout_id = $1 AND wave = $2) AS w ON true"
    " LEFT JOIN LATERAL (SELECT rollout_id, $3 = ANY(node_ids) AS in_plan,"
    "  (node_waves ->> $3)::int AS approved_wave FROM plans WHERE rollout_id = $1) AS p ON true"
)
# A place in pool $1's out-of-service budget freed: the nodes parked longest for one become
# claimable, as many as there are free places (at least one), not every parked node of the
# pool. Waking them all (1,400 in a 2,000-node fleet's last wave) had every one claimed, its
# node read from the inventory and its budget checked to take one place, at every place that
# freed. Counting the free places, not one per freed place, makes up for a wake whose node
# did not take its place (it failed, or waits for the inventory).
_WAKE_PARKED = (
    "UPDATE node_work SET parked = false, lease_until = now() WHERE id IN ("
    " SELECT id FROM node_work WHERE pool = $1 AND parked"
    " ORDER BY COALESCE(lease_until, updated_at), id"
    " LIMIT GREATEST(1,"
    "  (SELECT COALESCE(max(w.max_unavailable), 1) FROM node_work n"
    "   JOIN waves w ON w.rollout_id = n.rollout_id AND w.wave = n.wave"
    "   WHERE n.pool = $1 AND n.parked)"
    f"  - (SELECT count(*) FROM node_work WHERE pool = $1 AND state IN ({_OUT}))))"
)
_CLAIM_COLUMNS = (
    "id, rollout_id, wave, node_id, state, lease_token, attempts, components, progress,"
    " correlation_id, kind"
)


class PostgresStore(PooledStore["PostgresTx"]):
    """An ``UpdaterStore`` on the service's pool (its connections' search_path is the schema)."""

    def __init__(self, pool: asyncpg.Pool, source: str) -> None:
        super().__init__(pool, source, PostgresTx)


def _claim(row: asyncpg.Record) -> Claim:
    return Claim(
        row["id"],
        row["rollout_id"],
        row["wave"],
        row["node_id"],
        NodeStep(row["state"]),
        row["lease_token"],
        row["attempts"],
        tuple(row["components"]),
        json.loads(row["progress"]),
        row["correlation_id"],
        row["kind"],
    )


@dataclass(frozen=True, slots=True)
class PostgresTx:
    """An ``UpdaterTx`` on a connection inside an open transaction."""

    conn: Conn
    events: EventSink

    async def record_plan(
        self,
        rollout_id: str,
        stack_hash: str,
        nodes: frozenset[str],
        waves: Mapping[str, int] | None = None,
    ) -> None:
        await self.conn.execute(
            "INSERT INTO plans (rollout_id, stack_hash, node_ids, node_waves)"
            " VALUES ($1, $2, $3, $4) ON CONFLICT (rollout_id) DO NOTHING",
            rollout_id,
            stack_hash,
            sorted(nodes),
            json.dumps(dict(sorted((waves or {}).items()))),
        )

    async def plan_waves(self, rollout_id: str) -> dict[str, int]:
        waves = await self.conn.fetchval(
            "SELECT node_waves FROM plans WHERE rollout_id = $1", rollout_id
        )
        return {} if waves is None else {str(k): int(v) for k, v in json.loads(waves).items()}

    async def plan_nodes(self, rollout_id: str) -> frozenset[str] | None:
        nodes = await self.conn.fetchval(
            "SELECT node_ids FROM plans WHERE rollout_id = $1", rollout_id
        )
        return None if nodes is None else frozenset(nodes)

    async def record_bundle(
        self, stack_hash: str, bundle_uri: str | None, components: tuple[AttestedComponent, ...]
    ) -> None:
        body = json.dumps([c.model_dump(mode="json") for c in components])
        await self.conn.execute(
            "INSERT INTO bundles (stack_hash, bundle_uri, components) VALUES ($1, $2, $3)"
            " ON CONFLICT (stack_hash) DO UPDATE SET bundle_uri = EXCLUDED.bundle_uri,"
            " components = EXCLUDED.components, attested_at = now()",
            stack_hash,
            bundle_uri,
            body,
        )

    async def target(self, rollout_id: str) -> Target | None:
        row = await self.conn.fetchrow(
            "SELECT b.stack_hash, b.bundle_uri, b.components FROM plans p"
            " JOIN bundles b ON b.stack_hash = p.stack_hash WHERE p.rollout_id = $1",
            rollout_id,
        )
        if row is None:
            return None
        components = tuple(
            AttestedComponent.model_validate(c, strict=False) for c in json.loads(row["components"])
        )
        return Target(row["stack_hash"], row["bundle_uri"], components)

    async def record_wave(self, wave: WavePlanned, correlation_id: str | None) -> bool:
        added = await self.conn.fetchval(
            "INSERT INTO waves (rollout_id, wave, node_ids, max_unavailable, failure_budget,"
            " correlation_id) VALUES ($1, $2, $3, $4, $5, $6)"
            " ON CONFLICT (rollout_id, wave) DO NOTHING RETURNING true",
            wave.rollout_id,
            wave.wave,
            list(wave.node_ids),
            wave.max_unavailable,
            wave.failure_budget,
            correlation_id,
        )
        if not added:
            return False
        # A node appears in one wave of a rollout; the first wave naming it keeps it.
        await self.conn.execute(
            "INSERT INTO node_work (rollout_id, wave, node_id, components, correlation_id)"
            " SELECT $1, $2, n, $4, $5 FROM unnest($3::text[]) WITH ORDINALITY AS u(n, i)"
            " ORDER BY i ON CONFLICT (rollout_id, node_id, kind) DO NOTHING",
            wave.rollout_id,
            wave.wave,
            list(wave.node_ids),
            [c.value for c in wave.components],
            correlation_id,
        )
        return True

    async def request_rollbacks(self, rollout_id: str, wave: int) -> int:
        rows = await self.conn.fetch(
            "INSERT INTO node_work (rollout_id, wave, node_id, components, correlation_id, kind)"
            " SELECT rollout_id, wave, node_id, components, correlation_id, 'rollback'"
            " FROM node_work WHERE rollout_id = $1 AND wave = $2 AND kind = 'update' ORDER BY id"
            " ON CONFLICT (rollout_id, node_id, kind) DO NOTHING RETURNING id",
            rollout_id,
            wave,
        )
        return len(rows)

    async def record_remedy(
        self,
        node_id: str,
        remedy_id: str,
        *,
        held: bool,
        progress: dict[str, Any],
        correlation_id: str | None,
    ) -> bool:
        # One decision per node at a time: two updaters reading the same drift twice (two
        # events) cannot both find "none open" and both add one.
        await self.conn.execute(
            "SELECT pg_advisory_xact_lock(hashtext('updater-remedy:' || $1))", node_id
        )
        if await self.conn.fetchval(
            "SELECT EXISTS (SELECT 1 FROM node_work WHERE node_id = $1 AND kind = 'remedy'"
            f" AND state NOT IN ({_list(frozenset({NodeStep.DONE, NodeStep.CANCELLED}))}))",
            node_id,
        ):
            return False
        added = await self.conn.fetchval(
            "INSERT INTO node_work (rollout_id, wave, node_id, components, correlation_id, kind,"
            " progress, lease_until) VALUES ($1, 0, $2, $3, $4, 'remedy', $5,"
            " CASE WHEN $6 THEN 'infinity'::timestamptz END)"
            " ON CONFLICT (rollout_id, node_id, kind) DO NOTHING RETURNING true",
            remedy_id,
            node_id,
            ["driver"],
            correlation_id,
            json.dumps(progress),
            held,
        )
        return bool(added)

    async def approve_remedy(self, node_id: str) -> bool:
        return await release_remedy(self.conn, node_id)

    async def withdraw_remedy(self, node_id: str, reason: str) -> bool:
        state = transition(NodeStep.PENDING, NodeStep.CANCELLED).value
        row = await self.conn.fetchval(
            "UPDATE node_work SET state = $2, reason = $3, lease_until = NULL, updated_at = now()"
            " WHERE node_id = $1 AND kind = 'remedy' AND state = 'pending'"
            " AND lease_until = 'infinity' RETURNING id",
            node_id,
            state,
            reason,
        )
        return row is not None

    async def remedy_facts(self, claim: Claim, pool: str) -> RemedyFacts:
        await self.conn.execute(
            "SELECT pg_advisory_xact_lock(hashtext('updater-pool:' || $1))", pool
        )
        await self.conn.execute("UPDATE node_work SET pool = $2 WHERE id = $1", claim.id, pool)
        in_rollout = await self.conn.fetchval(
            f"SELECT rollout_id FROM node_work WHERE node_id = $1 AND kind <> 'remedy'"
            f" AND state NOT IN ({_list(TERMINAL)}) ORDER BY id LIMIT 1",
            claim.node_id,
        )
        out = await self.conn.fetchrow(
            f"SELECT count(*) AS others, count(*) FILTER (WHERE kind = 'remedy') AS remedies"
            f" FROM node_work WHERE pool = $1 AND id <> $2 AND state IN ({_OUT})",
            pool,
            claim.id,
        )
        assert out is not None  # noqa: S101 - an aggregate always returns a row
        return RemedyFacts(
            node_id=claim.node_id,
            pool=pool,
            in_rollout=in_rollout,
            others_out=out["others"],
            remedies_out=out["remedies"],
        )

    async def update_item(
        self, rollout_id: str, node_id: str
    ) -> tuple[NodeStep, dict[str, Any]] | None:
        row = await self.conn.fetchrow(
            "SELECT state, progress FROM node_work WHERE rollout_id = $1 AND node_id = $2"
            " AND kind = 'update'",
            rollout_id,
            node_id,
        )
        if row is None:
            return None
        return NodeStep(row["state"]), dict(json.loads(row["progress"]))

    async def halt(self, rollout_id: str, reason: str) -> None:
        await self.conn.execute(
            "INSERT INTO halts (rollout_id, reason) VALUES ($1, $2)"
            " ON CONFLICT (rollout_id) DO NOTHING",
            rollout_id,
            reason,
        )

    async def claim(self, lease_s: float) -> Claim | None:
        row = await self.conn.fetchrow(_CLAIMABLE)
        if row is None:
            return None
        state = NodeStep(row["state"])
        if state is NodeStep.PENDING:
            state = transition(state, NodeStep.PREFLIGHT)
        claimed = await self.conn.fetchrow(
            "UPDATE node_work SET state = $2, attempts = attempts + 1, parked = false,"
            " lease_token = lease_token + 1, claimed_at = now(), updated_at = now(),"
            " lease_until = now() + make_interval(secs => $3) WHERE id = $1"
            f" RETURNING {_CLAIM_COLUMNS}",
            row["id"],
            state.value,
            lease_s,
        )
        assert claimed is not None  # noqa: S101 - the row is locked by the SELECT above
        return _claim(claimed)

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
        states = [r["state"] for r in rows]
        latest_quarantined = bool(states) and states[0] == NodeStep.QUARANTINED.value
        return latest_quarantined or any(s not in _TERMINAL_NAMES for s in states)

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
            f" RETURNING {_CLAIM_COLUMNS}",
            row["id"],
            lease_s,
        )
        assert claimed is not None  # noqa: S101 - the row is locked by the SELECT above
        return _claim(claimed)

    async def still_holds(self, claim: Claim, lease_s: float) -> bool:
        # One statement: the row is locked (and the lease renewed) only if the claim holds it.
        held = await self.conn.fetchval(
            "UPDATE node_work SET lease_until = now() + make_interval(secs => $3)"
            f" WHERE id = $1 AND lease_token = $2 AND state NOT IN ({_list(TERMINAL)})"
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
            _FACTS, claim.rollout_id, claim.wave, claim.node_id, pool, claim.id
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
            f" WHERE id = $1 RETURNING {_CLAIM_COLUMNS}",
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
            await self.conn.execute(_WAKE_PARKED, row["pool"])
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
        return _claim(kept) if keep and kept is not None else None

    async def complete_wave(self, rollout_id: str, wave: int) -> WaveResult | None:
        found = await self.conn.fetchrow(
            "SELECT correlation_id, completed_at FROM waves WHERE rollout_id = $1 AND wave = $2"
            " FOR UPDATE",
            rollout_id,
            wave,
        )
        if found is None or found["completed_at"] is not None:
            return None
        # Every item's last commit asks this: one EXISTS while any is open, not the whole wave's
        # rows each time (a 9,375-node wave read 88 million rows that way, lockstep bench rollout).
        if await self.conn.fetchval(
            f"SELECT EXISTS (SELECT 1 FROM node_work WHERE rollout_id = $1 AND wave = $2"
            f" AND kind = 'update' AND state NOT IN ({_list(TERMINAL)}))",
            rollout_id,
            wave,
        ):
            return None
        rows = await self.conn.fetch(
            "SELECT node_id, state FROM node_work WHERE rollout_id = $1 AND wave = $2"
            " AND kind = 'update' ORDER BY id",
            rollout_id,
            wave,
        )
        if any(NodeStep(r["state"]) not in TERMINAL for r in rows):
            return None
        await self.conn.execute(
            "UPDATE waves SET completed_at = now() WHERE rollout_id = $1 AND wave = $2",
            rollout_id,
            wave,
        )
        done = NodeStep.DONE.value
        return WaveResult(
            rollout_id,
            wave,
            tuple(r["node_id"] for r in rows if r["state"] == done),
            tuple(r["node_id"] for r in rows if r["state"] != done),
            found["correlation_id"],
        )

    async def history(self, node_id: str, limit: int) -> list[StepRecord]:
        return await step_history(self.conn, node_id, limit)

    async def completion_sent(self, rollout_id: str, wave: int, event_id: uuid.UUID) -> None:
        await self.conn.execute(
            "UPDATE waves SET completed_event = $3 WHERE rollout_id = $1 AND wave = $2",
            rollout_id,
            wave,
            event_id,
        )

    async def unanswered_completions(
        self, after_s: float, max_redrives: int, limit: int
    ) -> list[Completion]:
        rows = await self.conn.fetch(
            "SELECT rollout_id, wave, completed_event, redrives FROM waves w"
            " WHERE completed_event IS NOT NULL AND redrives < $2"
            " AND GREATEST(completed_at, redriven_at)"
            " <= now() - make_interval(secs => $1::float8 * 2 ^ redrives)"
            " AND NOT EXISTS (SELECT 1 FROM waves l WHERE l.rollout_id = w.rollout_id"
            " AND l.wave > w.wave)"
            " AND NOT EXISTS (SELECT 1 FROM halts h WHERE h.rollout_id = w.rollout_id)"
            " ORDER BY completed_at LIMIT $3 FOR UPDATE SKIP LOCKED",
            after_s,
            max_redrives,
            limit,
        )
        return [
            Completion(r["rollout_id"], r["wave"], r["completed_event"], r["redrives"])
            for r in rows
        ]

    async def redrive_completion(self, completion: Completion) -> bool:
        await self.conn.execute(
            "UPDATE waves SET redriven_at = now(), redrives = redrives + 1"
            " WHERE rollout_id = $1 AND wave = $2",
            completion.rollout_id,
            completion.wave,
        )
        return await outbox.republish(
            self.conn, completion.event_id, f"redrive-{completion.redrives + 1}"
        )


async def release_remedy(conn: Conn, node_id: str) -> bool:
    """Release the node's remedy held for approval (``lockstep node approve-remedy``)."""
    row = await conn.fetchval(
        "UPDATE node_work SET lease_until = NULL, updated_at = now() WHERE node_id = $1"
        " AND kind = 'remedy' AND state = 'pending' AND lease_until = 'infinity'"
        " RETURNING id",
        node_id,
    )
    return row is not None


async def release_quarantined(conn: Conn, node_id: str, reason: str) -> str:
    """Record an operator's release of a quarantined node (``lockstep node release``): a
    ``release`` item in the uncordoning step, which the updater runs like any other (it gives
    back Lockstep's drain only, then ends done with ``reason``). Returns the item's id;
    :class:`NotQuarantined` when the node's latest item did not end quarantined."""
    async with conn.transaction():
        # One decision per node at a time (as a remedy's): two releases cannot both pass.
        await conn.execute(
            "SELECT pg_advisory_xact_lock(hashtext('updater-remedy:' || $1))", node_id
        )
        latest = await conn.fetchrow(
            "SELECT state, kind FROM node_work WHERE node_id = $1 ORDER BY id DESC LIMIT 1",
            node_id,
        )
        if latest is None:
            raise NotQuarantined(f"the updater has no work recorded for {node_id}")
        if latest["kind"] == RELEASE and latest["state"] not in _TERMINAL_NAMES:
            raise NotQuarantined(f"a release of {node_id} is already under way")
        if latest["state"] != NodeStep.QUARANTINED.value:
            raise NotQuarantined(
                f"{node_id} is not quarantined (its latest work item, kind {latest['kind']}, "
                f"is {latest['state']})"
            )
        release_id = f"release-{uuid.uuid4().hex[:12]}"
        progress = {"ending": NodeStep.DONE.value, "ending_reason": reason}
        await conn.execute(
            "INSERT INTO node_work (rollout_id, wave, node_id, components, kind, state,"
            " progress) VALUES ($1, 0, $2, '{}', 'release', $3, $4)",
            release_id,
            node_id,
            NodeStep.UNCORDONING.value,
            json.dumps(progress),
        )
    return release_id


async def step_history(conn: Conn, node_id: str, limit: int) -> list[StepRecord]:
    """The node's last ``limit`` steps, oldest first (``lockstep node history``)."""
    rows = await conn.fetch(
        "SELECT * FROM (SELECT id, rollout_id, wave, step, attempt, token, started_at,"
        " ended_at, outcome, reason FROM node_steps WHERE node_id = $1"
        " ORDER BY id DESC LIMIT $2) s ORDER BY id",
        node_id,
        limit,
    )
    return [
        StepRecord(
            r["rollout_id"],
            r["wave"],
            r["step"],
            r["attempt"],
            r["token"],
            r["started_at"],
            r["ended_at"],
            r["outcome"],
            r["reason"],
        )
        for r in rows
    ]


joined = Joined(PostgresTx)
"""``joined(handler)``: ``handler`` run in the consumer runtime's transaction (its inbox claim
and outbox)."""
