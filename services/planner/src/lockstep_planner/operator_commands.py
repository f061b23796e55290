"""The planner's operator commands answered over the bus (``lockstep rollout status|audit``),
by ``lockstep_common.operator.OperatorResponder`` (``app.py`` adds them to the service): the CLI
reads none of the planner's tables for them. Both only read, each in one snapshot.
"""

from __future__ import annotations

import json
from typing import Any

from lockstep_common.db import Conn
from lockstep_common.events.v1 import (
    AuditEntry,
    IntentOutcome,
    RolloutAuditAnswered,
    RolloutAuditRequested,
    RolloutState,
    RolloutStatusAnswered,
    RolloutStatusRequested,
    RolloutWaveState,
)
from lockstep_common.operator import Asker, Command, Refusal


async def rollout_status(
    conn: Conn, request: RolloutStatusRequested, asker: Asker
) -> RolloutStatusAnswered:
    """The rollout with its waves and nodes by step; the refused intent when there is none."""
    del asker
    rollout_id = request.rollout_id
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        row = await conn.fetchrow(
            "SELECT rollout_id, intent_id, stack_hash, change_class, dry_run, state, plan_hash,"
            " approvals, approvals_needed, reason, created_at, updated_at,"
            " coalesce(plan->'fabric'->'deferred', '{}')::text AS deferred FROM rollouts"
            " WHERE rollout_id = $1",
            rollout_id,
        )
        if row is None:
            refused = await conn.fetchrow(
                "SELECT intent_id, state, reasons FROM intents WHERE rollout_id = $1", rollout_id
            )
            if refused is None:
                raise Refusal("not_found", f"no rollout {rollout_id}")
            return RolloutStatusAnswered(
                intent=IntentOutcome(
                    intent_id=refused["intent_id"],
                    state=refused["state"],
                    reasons=tuple(refused["reasons"]),
                )
            )
        waves = await conn.fetch(
            "SELECT number, state, cardinality(node_ids) AS nodes, components, gate_passed,"
            " succeeded, failed, released_at, deadline, soak_until FROM waves"
            " WHERE rollout_id = $1 ORDER BY number",
            rollout_id,
        )
        steps = await conn.fetch(
            "SELECT coalesce(step, 'waiting') AS step, count(*) AS nodes FROM rollout_nodes"
            " WHERE rollout_id = $1 GROUP BY 1 ORDER BY 1",
            rollout_id,
        )
    fields = {k: row[k] for k in RolloutState.model_fields if k not in _DERIVED}
    return RolloutStatusAnswered(
        rollout=RolloutState(
            **{**fields, "approvals": tuple(row["approvals"])},
            deferred=json.loads(row["deferred"]),
            waves=tuple(
                RolloutWaveState(**{**dict(w), "components": tuple(w["components"])}) for w in waves
            ),
            nodes_by_step={s["step"]: s["nodes"] for s in steps},
        )
    )


_DERIVED = frozenset({"deferred", "waves", "nodes_by_step"})


async def rollout_audit(
    conn: Conn, request: RolloutAuditRequested, asker: Asker
) -> RolloutAuditAnswered:
    """Every decision about the rollout, oldest first; ``not_found`` when there is none."""
    del asker
    rows = await conn.fetch(
        "SELECT at, actor, action, detail FROM audit WHERE rollout_id = $1 ORDER BY id",
        request.rollout_id,
    )
    if not rows:
        raise Refusal("not_found", f"no audit trail for {request.rollout_id}")
    return RolloutAuditAnswered(entries=tuple(AuditEntry(**dict(r)) for r in rows))


COMMANDS: tuple[Command[Any], ...] = (
    Command("rollout.status", RolloutStatusRequested, RolloutStatusAnswered, rollout_status),
    Command("rollout.audit", RolloutAuditRequested, RolloutAuditAnswered, rollout_audit),
)
