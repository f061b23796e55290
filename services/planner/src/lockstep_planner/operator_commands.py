"""The planner's operator commands answered over the bus (``lockstep rollout
plan|start|list|status|audit|approve|pause|resume|abort``, ``lockstep fabric list|show|pin``),
by ``lockstep_common.operator.OperatorResponder`` (``app.py`` adds them to the service): the CLI
reads none of the planner's tables. Reads answer from one snapshot; writes are queued in the
transaction that records them and carried out at once by the worker's own code, so that the
reply is the planner's decision.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any, Protocol

from lockstep_common.db import Conn
from lockstep_common.envelope import EventData
from lockstep_common.errors import TransientError
from lockstep_common.events.v1 import (
    AuditEntry,
    FabricDomainState,
    FabricListAnswered,
    FabricListRequested,
    FabricPinAnswered,
    FabricPinRequested,
    FabricShowAnswered,
    FabricShowRequested,
    FleetNode,
    IntentOutcome,
    IntentSubmitted,
    PlanAsk,
    PoolShowAnswered,
    PoolShowRequested,
    PoolWindows,
    RolloutAuditAnswered,
    RolloutAuditRequested,
    RolloutControlAnswered,
    RolloutControlRequested,
    RolloutListAnswered,
    RolloutListed,
    RolloutListRequested,
    RolloutPlanAnswered,
    RolloutPlanRequested,
    RolloutStartAnswered,
    RolloutStartRequested,
    RolloutState,
    RolloutStatusAnswered,
    RolloutStatusRequested,
    RolloutWaveState,
)
from lockstep_common.operator import Asker, Command, Refusal
from lockstep_common.outbox import EventSink
from lockstep_planner.adapters.repository import PostgresTx
from lockstep_planner.domain.fabric import FabricConflict, FabricDomain, Lifecycle, pin
from lockstep_planner.handlers import rollout_id_of
from lockstep_planner.lifecycle import note
from lockstep_planner.plan_views import page_of, status_strata_of, summary_of
from lockstep_planner.planning import Planning, decide
from lockstep_planner.store import IntentRow


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
            " coalesce(plan->'fabric'->'deferred', '{}')::text AS deferred,"
            " jsonb_build_object('strata', plan->'strata', 'stratum_sizes', plan->'stratum_sizes')"
            "::text AS strata FROM rollouts"
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
            strata=status_strata_of(json.loads(row["strata"])),
        )
    )


_DERIVED = frozenset({"deferred", "waves", "nodes_by_step", "strata"})


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


# --- rollout plan / start / list ------------------------------------------------------------------


class Desk(Protocol):
    """What planning on request needs of the running service (``app.py`` builds it)."""

    planning: Planning
    lease_s: float
    """How long ``rollout start`` holds the intent it records before the worker may take it."""

    async def fleet(self) -> Sequence[FleetNode]:
        """The whole fleet from the inventory (``fleet.query``); ``TransientError`` if silent."""
        ...

    async def plan_now(self, row: IntentRow) -> str:
        """Plan a held intent with the worker's own code: ``decided`` or why not yet."""
        ...


class _Unsent(EventSink):
    """The sink of code that must emit nothing (a dry run, recording an intent)."""

    def _keep(self, subject: str, env: Any) -> None:
        raise AssertionError(f"nothing is published here (tried {subject})")


def _tx(conn: Conn) -> PostgresTx:
    return PostgresTx(conn, _Unsent("/lockstep/planner"))


async def _stack_of(conn: Conn, ask: PlanAsk) -> str:
    """The stack hash of the attested bundle asked for; refused (``invalid``) if none."""
    if ask.stack_hash is not None:
        known = await conn.fetchval(
            "SELECT true FROM bundles WHERE stack_hash = $1", ask.stack_hash
        )
        if not known:
            raise Refusal("invalid", f"--bundle: no attested bundle with stack {ask.stack_hash}")
        return ask.stack_hash
    bundle_id, _, version = (ask.bundle or "").partition("@")
    stack_hash: str | None = await conn.fetchval(
        "SELECT stack_hash FROM bundles WHERE bundle_id = $1"
        " AND ($2 = '' OR bundle_version = $2) ORDER BY attested_at DESC LIMIT 1",
        bundle_id,
        version,
    )
    if stack_hash is None:
        named = f"{bundle_id} version {version}" if version else bundle_id
        raise Refusal(
            "invalid", f"--bundle: no attested bundle {named} (none announced by bundle.attested)"
        )
    return stack_hash


async def _bundle_name(conn: Conn, stack_hash: str) -> str:
    name: str | None = await conn.fetchval(
        "SELECT bundle_id || '@' || bundle_version FROM bundles WHERE stack_hash = $1", stack_hash
    )
    return name or stack_hash


def _intent(ask: PlanAsk, stack_hash: str, request_id: uuid.UUID, **fields: Any) -> IntentSubmitted:
    return IntentSubmitted(
        intent_id=request_id,
        stack_hash=stack_hash,
        scope=ask.scope,
        change_class=ask.change_class,
        strategy=ask.strategy,
        **fields,
    )


async def _fleet(desk: Desk) -> Sequence[FleetNode]:
    try:
        return await desk.fleet()
    except TransientError as exc:
        raise Refusal("failed", f"the fleet could not be read: {exc}") from None


async def _paged(
    conn: Conn, plan: dict[str, Any], plan_hash: str, offset: int | None
) -> RolloutPlanAnswered:
    summary = summary_of(plan, plan_hash, await _bundle_name(conn, _stack_asked(plan)))
    if offset is None:
        return RolloutPlanAnswered(plan=summary)
    if offset > summary.nodes:
        raise Refusal("invalid", f"offset {offset}: the plan places {summary.nodes} node(s)")
    nodes, places, after = page_of(plan, offset)
    return RolloutPlanAnswered(plan=summary, nodes=nodes, places=places, next_offset=after)


def _stack_asked(plan: dict[str, Any]) -> str:
    return str(plan["intent"]["stack_hash"])


def plan_command(desk: Desk) -> Command[RolloutPlanRequested]:
    """``rollout.plan``: a dry run (the plan ``rollout start`` would make now, stored nowhere,
    announced nowhere), or a planned rollout's plan; its summary, and a page of its nodes when
    an offset is asked."""

    async def run(conn: Conn, request: RolloutPlanRequested, asker: Asker) -> RolloutPlanAnswered:
        if request.rollout_id is not None:
            row = await conn.fetchrow(
                "SELECT plan, plan_hash FROM rollouts WHERE rollout_id = $1 AND NOT dry_run",
                request.rollout_id,
            )
            if row is None:
                raise Refusal("not_found", f"no rollout {request.rollout_id}")
            return await _paged(conn, json.loads(row["plan"]), row["plan_hash"], request.offset)
        assert request.ask is not None  # noqa: S101 - the request's validator: one of the two
        stack_hash = await _stack_of(conn, request.ask)
        intent = _intent(
            request.ask, stack_hash, asker.request_id, submitted_by=asker.identity, dry_run=True
        )
        row_id = rollout_id_of(intent.intent_id)
        fleet = await _fleet(desk)
        async with conn.transaction(isolation="repeatable_read"):
            found = await decide(
                _tx(conn),
                IntentRow(intent.intent_id, asker.request_id, row_id, intent, asker.now),
                fleet,
                desk.planning,
                asker.now,
            )
        if found.rollout is None:
            return RolloutPlanAnswered(reasons=found.reasons)
        return await _paged(conn, found.rollout.plan, found.rollout.plan_hash, request.offset)

    return Command("rollout.plan", RolloutPlanRequested, RolloutPlanAnswered, run)


async def _decided(conn: Conn, intent_id: uuid.UUID, why: str = "") -> RolloutStartAnswered:
    """The planner's decision on an intent, as ``rollout start`` is answered (``why``: why it
    is not decided yet, when it is not)."""
    row = await conn.fetchrow(
        "SELECT i.state AS decision, i.reasons, i.rollout_id, r.state, r.plan, r.plan_hash,"
        " r.approvals_needed FROM intents i LEFT JOIN rollouts r USING (rollout_id)"
        " WHERE i.intent_id = $1",
        intent_id,
    )
    if row is None:  # pragma: no cover - recorded by the same request
        raise Refusal("failed", f"intent {intent_id} was not recorded")
    if row["decision"] not in ("planned", "refused"):
        return RolloutStartAnswered(
            intent_id=intent_id,
            rollout_id=row["rollout_id"],
            decision="pending",
            reasons=(
                f"{why or 'the planner has not decided yet'}; it plans it again once the hold "
                "of this request lapses",
            ),
        )
    if row["plan"] is None:
        return RolloutStartAnswered(
            intent_id=intent_id,
            rollout_id=row["rollout_id"],
            decision="refused",
            reasons=tuple(row["reasons"]),
        )
    plan = json.loads(row["plan"])
    return RolloutStartAnswered(
        intent_id=intent_id,
        rollout_id=row["rollout_id"],
        decision="planned",
        state=row["state"],
        approvals_needed=row["approvals_needed"],
        plan=summary_of(plan, row["plan_hash"], await _bundle_name(conn, _stack_asked(plan))),
    )


def start_command(desk: Desk) -> Command[RolloutStartRequested]:
    """``rollout.start``: the intent is recorded (its id the request's, held by this command)
    in the write's transaction, then planned at once by the worker's own code; the reply is
    the decision: planned (running, or awaiting approval), refused with every reason, or
    pending when the fleet could not be read (the worker plans it once the hold lapses)."""

    async def run(conn: Conn, request: RolloutStartRequested, asker: Asker) -> RolloutStartAnswered:
        ask = request.ask
        if ask is None:
            asked = await conn.fetchval(
                "SELECT plan->'intent' FROM rollouts WHERE plan_hash = $1"
                " ORDER BY created_at DESC LIMIT 1",
                request.plan_hash,
            )
            if asked is None:
                raise Refusal(
                    "not_found",
                    f"--plan: no rollout was planned with hash {request.plan_hash}; give the "
                    "request it was planned from with it (--bundle, --scope, --class), or the "
                    "file `lockstep rollout plan --json` printed",
                )
            ask = PlanAsk.model_validate(json.loads(asked), strict=False)
        stack_hash = await _stack_of(conn, ask)
        intent = _intent(
            ask,
            stack_hash,
            asker.request_id,
            approval_ref=request.approval_ref,
            submitted_by=request.by,
            plan_hash=request.plan_hash,
        )
        rollout_id = rollout_id_of(intent.intent_id)
        tx = _tx(conn)
        row = IntentRow(intent.intent_id, asker.request_id, rollout_id, intent, asker.now)
        if not await tx.add_intent(row, held_s=desk.lease_s):
            raise Refusal("conflict", f"intent {intent.intent_id} was already submitted")
        await note(
            tx,
            rollout_id,
            request.by,
            "intent submitted",
            f"intent {intent.intent_id}: stack {stack_hash}, class {intent.change_class}, "
            f"approval {intent.approval_ref or '(none)'}; asked as {asker.identity}"
            + (f", only plan {request.plan_hash}" if request.plan_hash else ""),
            asker.now,
        )
        return RolloutStartAnswered(
            intent_id=intent.intent_id, rollout_id=rollout_id, decision="pending"
        )

    async def settle(conn: Conn, answer: EventData, asker: Asker) -> RolloutStartAnswered:
        del asker
        assert isinstance(answer, RolloutStartAnswered)  # noqa: S101 - run() returns it
        row = await _tx(conn).intent(answer.intent_id)
        why = ""
        if row is not None and row.state == "planning":
            why = await desk.plan_now(row)
        return await _decided(conn, answer.intent_id, why)

    return Command(
        "rollout.start",
        RolloutStartRequested,
        RolloutStartAnswered,
        run,
        writes=True,
        settle=settle,
    )


async def rollout_list(
    conn: Conn, request: RolloutListRequested, asker: Asker
) -> RolloutListAnswered:
    """Rollouts newest first, a page at a time (dry runs are plans looked at: not listed)."""
    del asker
    before: tuple[datetime, str] | None = None
    if request.before is not None:
        at = await conn.fetchval(
            "SELECT created_at FROM rollouts WHERE rollout_id = $1", request.before
        )
        if at is None:
            raise Refusal("not_found", f"no rollout {request.before}")
        before = (at, request.before)
    rows = await conn.fetch(
        "SELECT r.rollout_id, r.state, r.change_class, r.created_at, r.updated_at, r.reason,"
        " cardinality(r.approvals) AS approvals, r.approvals_needed,"
        " coalesce(b.bundle_id || '@' || b.bundle_version, r.stack_hash) AS bundle,"
        " coalesce((SELECT sum(cardinality(w.node_ids)) FROM waves w"
        " WHERE w.rollout_id = r.rollout_id), 0)::int AS nodes"
        " FROM rollouts r LEFT JOIN bundles b USING (stack_hash)"
        " WHERE NOT r.dry_run AND ($1::text IS NULL OR r.state = $1)"
        " AND ($2::timestamptz IS NULL OR (r.created_at, r.rollout_id) < ($2, $3))"
        " ORDER BY r.created_at DESC, r.rollout_id DESC LIMIT $4",
        request.state,
        before[0] if before else None,
        before[1] if before else "",
        request.limit + 1,
    )
    page = rows[: request.limit]
    return RolloutListAnswered(
        rollouts=tuple(RolloutListed(**dict(r)) for r in page),
        next_before=page[-1]["rollout_id"] if len(rows) > request.limit else None,
    )


class _Unwired:
    """The desk of the catalogue's copy of the commands (their names and models only)."""

    planning: Planning
    lease_s = 0.0

    async def fleet(self) -> Sequence[FleetNode]:
        raise TransientError("the planner is not running here")

    async def plan_now(self, row: IntentRow) -> str:
        del row
        return "the planner is not running here"


def all_commands(carry_out: CarryOut, desk: Desk | None = None) -> tuple[Command[Any], ...]:
    """Every operator command the planner answers (``app.py``; the docs' and the permission
    matrix's list, ``lockstep_cli.catalog``, which gives no ``desk``)."""
    desk = desk or _Unwired()
    return (
        *COMMANDS,
        Command("rollout.list", RolloutListRequested, RolloutListAnswered, rollout_list),
        plan_command(desk),
        start_command(desk),
        control_command(carry_out),
        pin_command(carry_out),
    )
