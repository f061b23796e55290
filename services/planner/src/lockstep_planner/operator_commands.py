"""The planner's operator commands answered over the bus (``lockstep rollout status|audit``,
``lockstep fabric list|show``),
by ``lockstep_common.operator.OperatorResponder`` (``app.py`` adds them to the service): the CLI
reads none of the planner's tables for them. Both only read, each in one snapshot.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

from lockstep_common.db import Conn
from lockstep_common.envelope import EventData
from lockstep_common.events.v1 import (
    AuditEntry,
    FabricDomainState,
    FabricListAnswered,
    FabricListRequested,
    FabricPinAnswered,
    FabricPinRequested,
    FabricShowAnswered,
    FabricShowRequested,
    IntentOutcome,
    PoolShowAnswered,
    PoolShowRequested,
    PoolWindows,
    RolloutAuditAnswered,
    RolloutAuditRequested,
    RolloutControlAnswered,
    RolloutControlRequested,
    RolloutState,
    RolloutStatusAnswered,
    RolloutStatusRequested,
    RolloutWaveState,
)
from lockstep_common.operator import Asker, Command, Refusal
from lockstep_planner.domain.fabric import FabricConflict, FabricDomain, Lifecycle, pin


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


# A domain with its bundles by name (ID@VERSION) where the planner knows them.
_DOMAIN = (
    "d.domain, d.current_hash, d.target_hash, d.lifecycle, d.recycle_level, d.update_state,"
    " d.update_reason, d.rollout_id, d.node_ids, d.changed_by, d.changed_at,"
    " coalesce(c.bundle_id || '@' || c.bundle_version, d.current_hash) AS current,"
    " coalesce(t.bundle_id || '@' || t.bundle_version, d.target_hash) AS target"
    " FROM fabric_domains d LEFT JOIN bundles c ON c.stack_hash = d.current_hash"
    " LEFT JOIN bundles t ON t.stack_hash = d.target_hash"
)
AUDIT_SHOWN = 20


def _domain(row: Any) -> FabricDomainState:
    """The reason names bundles as ``ID@VERSION`` where the planner stored their hashes."""
    reason = str(row["update_reason"])
    for key in ("current", "target"):
        if row[f"{key}_hash"] and row[key]:
            reason = reason.replace(row[f"{key}_hash"], row[key])
    return FabricDomainState(
        domain=row["domain"],
        current=row["current"],
        current_stack_hash=row["current_hash"],
        target=row["target"],
        target_stack_hash=row["target_hash"],
        lifecycle=row["lifecycle"],
        update_state=row["update_state"],
        update_reason=reason,
        recycle_level=row["recycle_level"],
        rollout_id=row["rollout_id"],
        nodes=tuple(row["node_ids"]),
        changed_by=row["changed_by"],
        changed_at=row["changed_at"],
    )


async def fabric_list(conn: Conn, request: FabricListRequested, asker: Asker) -> FabricListAnswered:
    """Every fabric domain, by id."""
    del request, asker
    rows = await conn.fetch(f"SELECT {_DOMAIN} ORDER BY d.domain")
    return FabricListAnswered(domains=tuple(_domain(r) for r in rows))


async def fabric_show(conn: Conn, request: FabricShowRequested, asker: Asker) -> FabricShowAnswered:
    """One domain and its last audit lines; ``not_found`` when the planner knows none."""
    del asker
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        row = await conn.fetchrow(f"SELECT {_DOMAIN} WHERE d.domain = $1", request.domain)
        if row is None:
            raise Refusal("not_found", f"no fabric domain {request.domain}")
        audit = await conn.fetch(
            "SELECT at, actor, action, detail FROM audit WHERE rollout_id = $1"
            " ORDER BY id DESC LIMIT $2",
            f"fabric:{request.domain}",
            AUDIT_SHOWN,
        )
    return FabricShowAnswered(
        domain=_domain(row), history=tuple(AuditEntry(**dict(a)) for a in reversed(audit))
    )


async def pool_show(conn: Conn, request: PoolShowRequested, asker: Asker) -> PoolShowAnswered:
    """Every pool's and site's maintenance windows, or the one asked for with its recent audit
    lines (``lockstep pool show``); an answer with neither when none was ever set."""
    del asker
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        if request.scope is None or request.name is None:
            rows = await conn.fetch("SELECT * FROM maintenance_windows ORDER BY scope, name")
            return PoolShowAnswered(windows=tuple(_windows(r) for r in rows))
        row = await conn.fetchrow(
            "SELECT * FROM maintenance_windows WHERE scope = $1 AND name = $2",
            request.scope,
            request.name,
        )
        audit = await conn.fetch(
            "SELECT at, actor, action, detail FROM audit WHERE rollout_id = $1"
            " ORDER BY id DESC LIMIT $2",
            f"{request.scope}:{request.name}",
            AUDIT_SHOWN,
        )
    return PoolShowAnswered(
        windows=() if row is None else (_windows(row),),
        history=tuple(AuditEntry(**dict(a)) for a in reversed(audit)),
    )


def _windows(row: Any) -> PoolWindows:
    return PoolWindows(
        scope=row["scope"],
        name=row["name"],
        timezone=row["timezone"],
        windows=tuple(row["windows"]),
        set_by=row["set_by"],
        set_at=row["set_at"],
    )


CarryOut = Callable[[], Awaitable[object]]
"""Carry out the open commands now (the worker's own pass, ``PlannerWorker.commands``)."""


async def rollout_control(
    conn: Conn, request: RolloutControlRequested, asker: Asker
) -> RolloutControlAnswered:
    """Queue the command for the planner's worker, in the row it carries out and audits (the
    name given; the NATS identity that asked is in ``operator_requests``)."""
    del asker
    known = await conn.fetchval(
        "SELECT true FROM rollouts WHERE rollout_id = $1", request.rollout_id
    )
    if not known:
        raise Refusal("not_found", f"no rollout {request.rollout_id}")
    command_id = await conn.fetchval(
        "INSERT INTO commands (rollout_id, action, requested_by, reason, approval)"
        " VALUES ($1, $2, $3, $4, $5::jsonb) RETURNING id",
        request.rollout_id,
        request.action,
        request.by,
        request.reason,
        request.approval,
    )
    return RolloutControlAnswered(command_id=command_id, outcome="queued")


def control_command(carry_out: CarryOut) -> Command[RolloutControlRequested]:
    """``rollout.control``: queued in the write's transaction, then carried out at once by the
    worker's own pass (``carry_out``) so that the reply is the planner's outcome, not a poll of
    its table. The row lock waits for a pass of the worker's loop that holds the command."""

    async def settle(conn: Conn, answer: EventData, asker: Asker) -> RolloutControlAnswered:
        del asker
        assert isinstance(answer, RolloutControlAnswered)  # noqa: S101 - run() returns it
        await carry_out()
        outcome = await _outcome(conn, answer.command_id)
        if outcome is None:
            return answer  # not yet: more commands were open than one pass takes
        return RolloutControlAnswered(command_id=answer.command_id, outcome=str(outcome))

    return Command(
        "rollout.control",
        RolloutControlRequested,
        RolloutControlAnswered,
        rollout_control,
        writes=True,
        settle=settle,
    )


COMMANDS: tuple[Command[Any], ...] = (
    Command("fabric.list", FabricListRequested, FabricListAnswered, fabric_list),
    Command("fabric.show", FabricShowRequested, FabricShowAnswered, fabric_show),
    Command("pool.show", PoolShowRequested, PoolShowAnswered, pool_show),
    Command("rollout.status", RolloutStatusRequested, RolloutStatusAnswered, rollout_status),
    Command("rollout.audit", RolloutAuditRequested, RolloutAuditAnswered, rollout_audit),
)


BUNDLE_REF = re.compile(
    r"^(?P<id>[A-Za-z0-9][A-Za-z0-9._:/-]{0,127})(@(?P<version>[^\s@]{1,64}))?$"
)
"""``ID[@VERSION]``: what ``lockstep rollout plan --bundle`` takes too."""


async def _target_of(conn: Conn, domain: str, bundle: str) -> str:
    """The stack hash a pin of ``domain`` to ``bundle`` sets, refused as the planner would:
    a malformed reference, an unknown domain or bundle (the operator can fix them), or a
    conflict (``domain.fabric.pin``: PROVISIONING, OCI's 409)."""
    ref = BUNDLE_REF.match(bundle)
    if ref is None:
        raise Refusal("invalid", f"--bundle {bundle!r}: not a bundle reference (ID[@VERSION])")
    row = await conn.fetchrow(
        "SELECT lifecycle, current_hash, target_hash, rollout_id FROM fabric_domains"
        " WHERE domain = $1",
        domain,
    )
    if row is None:
        raise Refusal("not_found", f"no fabric domain {domain}")
    stack_hash: str | None = await conn.fetchval(
        "SELECT stack_hash FROM bundles WHERE bundle_id = $1"
        " AND ($2::text IS NULL OR bundle_version = $2) ORDER BY attested_at DESC LIMIT 1",
        ref["id"],
        ref["version"],
    )
    if stack_hash is None:
        raise Refusal("invalid", f"--bundle: no attested bundle {bundle}")
    known = FabricDomain(
        domain,
        current=row["current_hash"],
        target=row["target_hash"],
        lifecycle=Lifecycle(row["lifecycle"]),
        rollout=row["rollout_id"],
    )
    try:
        pin(known, stack_hash)
    except FabricConflict as exc:
        raise Refusal("conflict", str(exc).replace(stack_hash, bundle)) from None
    return stack_hash


async def fabric_pin(conn: Conn, request: FabricPinRequested, asker: Asker) -> FabricPinAnswered:
    """Check the pin, then queue it for the planner's worker (the only writer of a domain)."""
    del asker
    stack_hash = await _target_of(conn, request.domain, request.bundle)
    command_id = await conn.fetchval(
        "INSERT INTO commands (rollout_id, action, requested_by, bundle)"
        " VALUES ($1, 'pin', $2, $3) RETURNING id",
        f"fabric:{request.domain}",
        request.by,
        stack_hash,
    )
    return FabricPinAnswered(command_id=command_id, stack_hash=stack_hash, outcome="queued")


async def _outcome(conn: Conn, command_id: int) -> str | None:
    """The command's outcome once carried out; None when not yet. The row lock waits for a
    pass of the worker's loop that holds it (taken with SKIP LOCKED)."""
    async with conn.transaction():
        row = await conn.fetchrow(
            "SELECT outcome, done_at FROM commands WHERE id = $1 FOR UPDATE", command_id
        )
    return None if row is None or row["done_at"] is None else str(row["outcome"])


def pin_command(carry_out: CarryOut) -> Command[FabricPinRequested]:
    """``fabric.pin``: queued in the write's transaction, carried out at once (as
    ``rollout.control``)."""

    async def settle(conn: Conn, answer: EventData, asker: Asker) -> FabricPinAnswered:
        del asker
        assert isinstance(answer, FabricPinAnswered)  # noqa: S101 - run() returns it
        await carry_out()
        outcome = await _outcome(conn, answer.command_id)
        return answer if outcome is None else answer.model_copy(update={"outcome": outcome})

    return Command(
        "fabric.pin",
        FabricPinRequested,
        FabricPinAnswered,
        fabric_pin,
        writes=True,
        settle=settle,
    )


def all_commands(carry_out: CarryOut) -> tuple[Command[Any], ...]:
    """Every operator command the planner answers (``app.py``; the docs' and the permission
    matrix's list, ``lockstep_cli.catalog``)."""
    return (*COMMANDS, control_command(carry_out), pin_command(carry_out))
