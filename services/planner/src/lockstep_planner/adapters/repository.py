"""The planner's store on PostgreSQL (migrations/0001_planner.sql).

``PostgresStore`` opens a transaction on a pooled connection whose events go to the outbox
(``outbox.emitting``); ``joined`` runs a handler in the consumer runtime's own transaction (its
inbox claim and outbox). States are spelled only by ``domain.rollout``'s enums.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

import asyncpg

from lockstep_common import outbox
from lockstep_common.db import Conn
from lockstep_common.events.v1 import AttestedComponent, IntentSubmitted, WaveStratum
from lockstep_common.outbox import EventSink
from lockstep_common.stores import JoinedAt, PooledStore
from lockstep_planner.domain.approvals import Approval
from lockstep_planner.domain.fabric import FabricDomain, Lifecycle, RecycleLevel
from lockstep_planner.domain.rollout import RolloutState, WaveState
from lockstep_planner.store import (
    AuditEntry,
    BundleRow,
    Command,
    DueWave,
    FabricRow,
    IntentRow,
    RolloutRow,
    WaveRow,
    WindowsRow,
)

LIVE_STATES = [
    s.value
    for s in (RolloutState.PLANNED, RolloutState.RUNNING, RolloutState.PAUSED, RolloutState.HALTED)
]


class PostgresStore(PooledStore["PostgresTx"]):
    """A ``PlannerStore`` on the service's pool (its connections' search_path is the schema)."""

    def __init__(self, pool: asyncpg.Pool, source: str) -> None:
        super().__init__(pool, source, PostgresTx)


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _rollout(r: asyncpg.Record) -> RolloutRow:
    return RolloutRow(
        rollout_id=r["rollout_id"],
        intent_id=r["intent_id"],
        stack_hash=r["stack_hash"],
        change_class=r["change_class"],
        scope=json.loads(r["scope"]),
        dry_run=r["dry_run"],
        state=RolloutState(r["state"]),
        plan_hash=r["plan_hash"],
        plan=json.loads(r["plan"]),
        approvals_needed=r["approvals_needed"],
        created_at=r["created_at"],
        updated_at=r["updated_at"],
        approvals=tuple(r["approvals"]),
        signatures=tuple(r["signatures"]),
        reason=r["reason"],
    )


def _wave(r: asyncpg.Record) -> WaveRow:
    return WaveRow(
        rollout_id=r["rollout_id"],
        number=r["number"],
        state=WaveState(r["state"]),
        node_ids=tuple(r["node_ids"]),
        components=tuple(r["components"]),
        max_unavailable=r["max_unavailable"],
        failure_budget=r["failure_budget"],
        soak_s=r["soak_s"],
        planned_s=r["planned_s"],
        strata=tuple(WaveStratum.model_validate(s, strict=False) for s in json.loads(r["strata"])),
        gate_passed=r["gate_passed"],
        succeeded=r["succeeded"],
        failed=r["failed"],
        released_at=r["released_at"],
        deadline=r["deadline"],
        soak_until=r["soak_until"],
        release_event=r["release_event"],
        redriven_at=r["redriven_at"],
        redrives=r["redrives"],
    )


def _approval(raw: str | None) -> Approval | None:
    """The signed record a command carries; a malformed one is an approval that verifies
    nothing (the worker refuses it by name) rather than a loop that fails on every poll."""
    if raw is None:
        return None
    doc = json.loads(raw)
    if not isinstance(doc, dict):
        doc = {}
    return Approval(
        str(doc.get("approver", "")), str(doc.get("plan_hash", "")), str(doc.get("signature", ""))
    )


def _intent(r: asyncpg.Record) -> IntentRow:
    return IntentRow(
        intent_id=r["intent_id"],
        event_id=r["event_id"],
        rollout_id=r["rollout_id"],
        intent=IntentSubmitted.model_validate_json(r["payload"]),
        received_at=r["received_at"],
        state=r["state"],
        reasons=tuple(r["reasons"]),
        attempts=r["attempts"],
        lease_token=r["lease_token"],
    )


@dataclass(frozen=True, slots=True)
class PostgresTx:
    """A ``PlannerTx`` on a connection inside an open transaction."""

    conn: Conn
    events: EventSink

    async def save_bundle(self, bundle: BundleRow) -> None:
        await self.conn.execute(
            "INSERT INTO bundles (stack_hash, bundle_id, bundle_version, bundle_uri, components,"
            " attested_at) VALUES ($1, $2, $3, $4, $5::jsonb, $6)"
            " ON CONFLICT (stack_hash) DO UPDATE SET bundle_id = $2, bundle_version = $3,"
            " bundle_uri = $4, components = $5::jsonb,"
            " attested_at = $6",
            bundle.stack_hash,
            bundle.bundle_id,
            bundle.bundle_version,
            bundle.bundle_uri,
            _json([c.model_dump(mode="json") for c in bundle.components]),
            bundle.attested_at,
        )

    async def bundle(self, stack_hash: str) -> BundleRow | None:
        r = await self.conn.fetchrow("SELECT * FROM bundles WHERE stack_hash = $1", stack_hash)
        if r is None:
            return None
        return BundleRow(
            r["stack_hash"],
            r["bundle_id"],
            r["bundle_version"],
            r["bundle_uri"],
            tuple(
                AttestedComponent.model_validate(c, strict=False)
                for c in json.loads(r["components"])
            ),
            r["attested_at"],
        )

    async def add_intent(self, intent: IntentRow, *, held_s: float | None = None) -> bool:
        held = held_s is not None
        result: str = await self.conn.execute(
            "INSERT INTO intents (intent_id, event_id, rollout_id, payload, submitted_by,"
            " received_at, state, attempts, lease_token, lease_until)"
            " VALUES ($1, $2, $3, $4::jsonb, $5, $6,"
            " CASE WHEN $7 THEN 'planning' ELSE 'pending' END, $7::int, $7::int,"
            " CASE WHEN $7 THEN now() + make_interval(secs => $8) END)"
            " ON CONFLICT (intent_id) DO NOTHING",
            intent.intent_id,
            intent.event_id,
            intent.rollout_id,
            intent.intent.model_dump_json(),
            intent.intent.submitted_by,
            intent.received_at,
            held,
            held_s or 0.0,
        )
        return result.endswith(" 1")

    async def intent(self, intent_id: uuid.UUID) -> IntentRow | None:
        """The intent as recorded (its claim included)."""
        r = await self.conn.fetchrow("SELECT * FROM intents WHERE intent_id = $1", intent_id)
        return None if r is None else _intent(r)

    async def claim_intent(self, lease_s: float, now: datetime) -> IntentRow | None:
        r = await self.conn.fetchrow(
            "UPDATE intents SET state = 'planning', attempts = attempts + 1,"
            " lease_token = lease_token + 1, lease_until = now() + make_interval(secs => $1)"
            " WHERE intent_id = (SELECT intent_id FROM intents WHERE state = 'pending'"
            " OR (state = 'planning' AND lease_until < now())"
            " ORDER BY received_at FOR UPDATE SKIP LOCKED LIMIT 1) RETURNING *",
            lease_s,
        )
        return None if r is None else _intent(r)

    async def still_holds(self, intent: IntentRow) -> bool:
        token: int | None = await self.conn.fetchval(
            "SELECT lease_token FROM intents WHERE intent_id = $1 AND state = 'planning'"
            " FOR UPDATE",
            intent.intent_id,
        )
        return token == intent.lease_token

    async def decide_intent(
        self, intent_id: uuid.UUID, state: str, reasons: Iterable[str], now: datetime
    ) -> None:
        await self.conn.execute(
            "UPDATE intents SET state = $2, reasons = $3, decided_at = $4, lease_until = NULL"
            " WHERE intent_id = $1",
            intent_id,
            state,
            list(reasons),
            now,
        )

    async def busy_nodes(self, node_ids: Iterable[str]) -> dict[str, str]:
        rows = await self.conn.fetch(
            "SELECT n.node_id, n.rollout_id FROM rollout_nodes n JOIN rollouts r USING"
            " (rollout_id) WHERE n.node_id = ANY($1::text[]) AND r.state = ANY($2::text[])"
            " AND NOT r.dry_run",
            list(node_ids),
            LIVE_STATES,
        )
        return {r["node_id"]: r["rollout_id"] for r in rows}

    async def add_rollout(self, rollout: RolloutRow, waves: Iterable[WaveRow]) -> None:
        await self.conn.execute(
            "INSERT INTO rollouts (rollout_id, intent_id, stack_hash, change_class, scope, dry_run,"
            " state, plan_hash, plan, approvals, approvals_needed, reason, created_at,"
            " updated_at) VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7, $8, $9::jsonb, $10, $11,"
            " $12, $13, $14)",
            rollout.rollout_id,
            rollout.intent_id,
            rollout.stack_hash,
            rollout.change_class,
            _json(rollout.scope),
            rollout.dry_run,
            rollout.state.value,
            rollout.plan_hash,
            _json(rollout.plan),
            list(rollout.approvals),
            rollout.approvals_needed,
            rollout.reason,
            rollout.created_at,
            rollout.updated_at,
        )
        waves = list(waves)
        await self.conn.executemany(
            "INSERT INTO waves (rollout_id, number, state, node_ids, components, max_unavailable,"
            " failure_budget, soak_s, planned_s, strata) VALUES ($1, $2, $3, $4, $5, $6, $7, $8,"
            " $9, $10::jsonb)",
            [
                (
                    w.rollout_id,
                    w.number,
                    w.state.value,
                    list(w.node_ids),
                    list(w.components),
                    w.max_unavailable,
                    w.failure_budget,
                    w.soak_s,
                    w.planned_s,
                    _json([s.model_dump(mode="json") for s in w.strata]),
                )
                for w in waves
            ],
        )
        await self.conn.execute(
            "INSERT INTO rollout_nodes (rollout_id, node_id, wave)"
            " SELECT $1, * FROM unnest($2::text[], $3::int[])",
            rollout.rollout_id,
            [n for w in waves for n in w.node_ids],
            [w.number for w in waves for _ in w.node_ids],
        )

    async def rollout(self, rollout_id: str) -> RolloutRow | None:
        r = await self.conn.fetchrow(
            "SELECT * FROM rollouts WHERE rollout_id = $1 FOR UPDATE", rollout_id
        )
        return None if r is None else _rollout(r)

    async def plan_with_hash(self, plan_hash: str) -> dict[str, Any] | None:
        value = await self.conn.fetchval(
            "SELECT plan FROM rollouts WHERE plan_hash = $1 ORDER BY created_at DESC LIMIT 1",
            plan_hash,
        )
        return None if value is None else dict(json.loads(value))

    async def save_rollout(self, rollout: RolloutRow) -> None:
        await self.conn.execute(
            "UPDATE rollouts SET state = $2, approvals = $3, signatures = $4, reason = $5,"
            " updated_at = $6 WHERE rollout_id = $1",
            rollout.rollout_id,
            rollout.state.value,
            list(rollout.approvals),
            list(rollout.signatures),
            rollout.reason,
            rollout.updated_at,
        )

    async def waves(self, rollout_id: str) -> list[WaveRow]:
        rows = await self.conn.fetch(
            "SELECT * FROM waves WHERE rollout_id = $1 ORDER BY number", rollout_id
        )
        return [_wave(r) for r in rows]

    async def save_wave(self, wave: WaveRow) -> None:
        await self.conn.execute(
            "UPDATE waves SET state = $3, gate_passed = $4, succeeded = $5, failed = $6,"
            " released_at = $7, deadline = $8, soak_until = $9, release_event = $10,"
            " redriven_at = $11, redrives = $12"
            " WHERE rollout_id = $1 AND number = $2",
            wave.rollout_id,
            wave.number,
            wave.state.value,
            wave.gate_passed,
            wave.succeeded,
            wave.failed,
            wave.released_at,
            wave.deadline,
            wave.soak_until,
            wave.release_event,
            wave.redriven_at,
            wave.redrives,
        )

    async def record_step(self, rollout_id: str, node_id: str, step: str, at: datetime) -> None:
        # Only nodes the rollout holds; a step older than the one recorded changes nothing.
        await self.conn.execute(
            "UPDATE rollout_nodes SET step = $3, step_at = $4 WHERE rollout_id = $1"
            " AND node_id = $2 AND (step_at IS NULL OR step_at <= $4)",
            rollout_id,
            node_id,
            step,
            at,
        )

    async def due(self, now: datetime, limit: int, redrive_s: float) -> list[DueWave]:
        # Progress of a released wave: its release, its last re-drive, or the newest device
        # step the planner saw of any node of it (rollout_nodes.step_at).
        rows = await self.conn.fetch(
            "SELECT w.rollout_id, w.number, CASE WHEN w.state = 'soaking' THEN 'soak'"
            " WHEN w.deadline <= $1 THEN 'deadline' ELSE 'redrive' END AS why"
            " FROM waves w JOIN rollouts r USING (rollout_id)"
            " WHERE (w.state = 'soaking' AND w.gate_passed AND w.soak_until <= $1"
            " AND r.state = 'running')"
            " OR (w.state = 'released' AND w.deadline <= $1 AND r.state IN ('running', 'paused'))"
            " OR (w.state = 'released' AND r.state = 'running'"
            " AND GREATEST(w.released_at, w.redriven_at, (SELECT max(n.step_at)"
            " FROM rollout_nodes n WHERE n.rollout_id = w.rollout_id AND n.wave = w.number))"
            " <= $1 - make_interval(secs => $3))"
            " ORDER BY w.rollout_id, w.number LIMIT $2",
            now,
            limit,
            redrive_s,
        )
        return [DueWave(r["rollout_id"], r["number"], r["why"]) for r in rows]

    async def next_soak_end(self, now: datetime) -> datetime | None:
        value = await self.conn.fetchval(
            "SELECT min(w.soak_until) FROM waves w JOIN rollouts r USING (rollout_id)"
            " WHERE w.state = 'soaking' AND r.state = 'running' AND w.soak_until > $1",
            now,
        )
        return cast(datetime | None, value)

    async def republish(self, event_id: uuid.UUID, attempt: str) -> bool:
        return await outbox.republish(self.conn, event_id, attempt)

    async def open_commands(self, limit: int) -> list[Command]:
        rows = await self.conn.fetch(
            "SELECT id, rollout_id, action, requested_by, reason, approval, bundle FROM commands"
            " WHERE done_at IS NULL ORDER BY id FOR UPDATE SKIP LOCKED LIMIT $1",
            limit,
        )
        return [
            Command(
                r["id"],
                r["rollout_id"],
                r["action"],
                r["requested_by"],
                r["reason"],
                _approval(r["approval"]),
                r["bundle"],
            )
            for r in rows
        ]

    async def finish_command(self, command_id: int, outcome: str, now: datetime) -> None:
        await self.conn.execute(
            "UPDATE commands SET done_at = $2, outcome = $3 WHERE id = $1",
            command_id,
            now,
            outcome,
        )

    async def audit(self, *entries: AuditEntry) -> None:
        if not entries:
            return
        await self.conn.execute(
            "INSERT INTO audit (rollout_id, at, actor, action, detail) SELECT r, t, a, c, d FROM"
            " unnest($1::text[], $2::timestamptz[], $3::text[], $4::text[], $5::text[])"
            " WITH ORDINALITY AS v(r, t, a, c, d, i) ORDER BY i",
            [e.rollout_id for e in entries],
            [e.at for e in entries],
            [e.actor for e in entries],
            [e.action for e in entries],
            [e.detail for e in entries],
        )

    async def fabric_domains(self, ids: Iterable[str] | None = None) -> dict[str, FabricRow]:
        if ids is None:
            rows = await self.conn.fetch("SELECT * FROM fabric_domains ORDER BY domain FOR UPDATE")
        else:
            rows = await self.conn.fetch(
                "SELECT * FROM fabric_domains WHERE domain = ANY($1::text[])"
                " ORDER BY domain FOR UPDATE",
                sorted(set(ids)),
            )
        return {r["domain"]: _fabric(r) for r in rows}

    async def maintenance(self) -> list[WindowsRow]:
        rows = await self.conn.fetch("SELECT * FROM maintenance_windows ORDER BY scope, name")
        return [_windows(r) for r in rows]

    async def set_maintenance(
        self, scope: str, name: str, row: WindowsRow | None
    ) -> WindowsRow | None:
        found = await self.conn.fetchrow(
            "SELECT * FROM maintenance_windows WHERE scope = $1 AND name = $2 FOR UPDATE",
            scope,
            name,
        )
        if row is None:
            await self.conn.execute(
                "DELETE FROM maintenance_windows WHERE scope = $1 AND name = $2", scope, name
            )
        else:
            await self.conn.execute(
                "INSERT INTO maintenance_windows (scope, name, timezone, windows, set_by, set_at)"
                " VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (scope, name) DO UPDATE SET"
                " timezone = $3, windows = $4, set_by = $5, set_at = $6",
                scope,
                name,
                row.timezone,
                list(row.windows),
                row.set_by,
                row.set_at,
            )
        return None if found is None else _windows(found)

    async def save_fabric(self, *rows: FabricRow) -> None:
        if not rows:
            return
        await self.conn.executemany(
            "INSERT INTO fabric_domains (domain, current_hash, target_hash, lifecycle,"
            " recycle_level, update_state, update_reason, rollout_id, node_ids, changed_by,"
            " changed_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"
            " ON CONFLICT (domain) DO UPDATE SET current_hash = $2, target_hash = $3,"
            " lifecycle = $4, recycle_level = $5, update_state = $6, update_reason = $7,"
            " rollout_id = $8, node_ids = $9, changed_by = $10, changed_at = $11",
            [
                (
                    row.domain.id,
                    row.domain.current,
                    row.domain.target,
                    row.domain.lifecycle.value,
                    row.domain.recycle.value,
                    row.domain.update_state.value,
                    row.domain.update_reason,
                    row.domain.rollout,
                    list(row.node_ids),
                    row.changed_by,
                    row.changed_at,
                )
                for row in rows
            ],
        )


def _windows(r: asyncpg.Record) -> WindowsRow:
    return WindowsRow(
        r["scope"], r["name"], r["timezone"], tuple(r["windows"]), r["set_by"], r["set_at"]
    )


def _fabric(r: asyncpg.Record) -> FabricRow:
    domain = FabricDomain(
        r["domain"],
        current=r["current_hash"],
        target=r["target_hash"],
        lifecycle=Lifecycle(r["lifecycle"]),
        recycle=RecycleLevel(r["recycle_level"]),
        rollout=r["rollout_id"],
    )
    return FabricRow(domain, tuple(r["node_ids"]), r["changed_by"], r["changed_at"])


joined = JoinedAt(PostgresTx)
"""``joined(handler)``: ``handler`` run in the consumer runtime's transaction (its inbox claim
and outbox), with ``now`` from the system clock."""
