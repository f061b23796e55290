"""``lockstep rollout plan|start|status|pause|resume|abort|audit``: rollouts, for operators.

``plan`` and ``start`` publish ``intent.submitted`` (the ``cli`` NATS identity may) and wait
for the planner's answer: the plan, or the refusal with every reason. The bundle is named as
``ID[@VERSION]`` and resolved to its stack hash among the bundles the planner has seen
attested. ``status`` and ``audit`` read the planner's tables read-only (as ``lockstep dlq``
does). ``pause``, ``resume`` and ``abort`` write one row to the planner's ``commands`` table
and wait for the planner's worker to carry it out: the planner stays the only writer of a
rollout's state, so every change goes through its state table, its audit trail and its events
(``rollout.halted`` for an abort), and a command given while the planner is down is carried
out when it is back.
Exit codes: 0 done, 1 refused or not found, 2 bad input or an unreachable server.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.console import Group
from rich.table import Table
from rich.text import Text

from lockstep_cli.cli_io import fail, run, settings_of, stdout_console

if TYPE_CHECKING:
    import asyncpg
    from rich.console import Console

    from lockstep_common.events.v1 import IntentSubmitted, ScopeSelector, Strategy
    from lockstep_planner.settings import Settings

T = TypeVar("T")
rollout_app = typer.Typer(
    help="Rollouts: plan, start, follow, pause, resume, abort, audit.", no_args_is_help=True
)
console = stdout_console()
Json = Annotated[bool, typer.Option("--json", help="Print JSON only.")]
RolloutArg = Annotated[str, typer.Argument(help="Rollout id (r-...).")]
Wait = Annotated[float, typer.Option("--wait", help="Seconds to wait for the planner.")]
By = Annotated[str | None, typer.Option("--by", help="Who asks (default: the login name).")]
Reason = Annotated[str, typer.Option("--reason", help="Why, for the audit trail.")]


def _settings() -> Settings:
    from lockstep_planner.settings import Settings

    return settings_of(Settings)


async def _db(settings: Settings) -> asyncpg.Connection:
    from lockstep_common import db

    conn = await db.connect_with_retry(settings.database_url, attempts=3)
    # The planner's schema, as ServiceApp names it; nothing here migrates anything.
    await conn.execute(f"SET search_path TO {db.quote_ident(settings.db_schema or 'planner')}")
    return conn


async def _fetch(settings: Settings, sql: str, *args: Any) -> list[dict[str, Any]]:
    conn = await _db(settings)
    try:
        return [dict(r) for r in await conn.fetch(sql, *args)]
    finally:
        await conn.close()


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


# --- plan / start -------------------------------------------------------------------------------


def _strategy(path: Path | None) -> Strategy:
    from pydantic import ValidationError

    from lockstep_common.events.v1 import Strategy

    if path is None:
        return Strategy()
    import yaml

    try:
        doc = yaml.safe_load(path.read_text())
        return Strategy.model_validate_json(json.dumps(doc if doc is not None else {}))
    except OSError as exc:
        fail(f"--strategy {path}: {exc.strerror or exc}")
    except yaml.YAMLError as exc:
        fail(f"--strategy {path}: not YAML or JSON: {str(exc).splitlines()[0]}")
    except (TypeError, ValueError) as exc:
        if isinstance(exc, ValidationError):
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"]) or "(root)"
            fail(f"--strategy {path}: {where}: {err['msg']}")
        fail(f"--strategy {path}: {exc}")


def _scope(text: str) -> ScopeSelector:
    from lockstep_inventory.domain.pins import SelectorError, parse_selector

    try:
        return parse_selector(text)
    except SelectorError as exc:
        fail(f"--scope: {exc}")


async def _resolve(settings: Settings, bundle: str) -> str:
    """``ID[@VERSION]`` -> the stack hash of that attested bundle (the newest attested version
    when none is named)."""
    bundle_id, _, version = bundle.partition("@")
    rows = await _fetch(
        settings,
        "SELECT stack_hash, bundle_version FROM bundles WHERE bundle_id = $1"
        " AND ($2 = '' OR bundle_version = $2) ORDER BY attested_at DESC LIMIT 1",
        bundle_id,
        version,
    )
    if not rows:
        named = f"{bundle_id} version {version}" if version else bundle_id
        fail(f"--bundle: no attested bundle {named} (none announced by bundle.attested)", 1)
    return str(rows[0]["stack_hash"])


async def publish_intent(settings: Settings, data: IntentSubmitted, timeout_s: float) -> None:
    from lockstep_cli.publish import publish_as_cli
    from lockstep_common import subjects

    await publish_as_cli(
        settings.nats_access(),
        settings.namespace,
        subjects.intent_submitted(),
        data,
        timeout_s,
        "intent",
    )


async def await_decision(settings: Settings, intent_id: uuid.UUID, wait_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + wait_s
    while True:
        rows = await _fetch(
            settings,
            "SELECT i.state, i.reasons, i.rollout_id, r.state AS rollout_state, r.plan_hash,"
            " r.plan, r.dry_run FROM intents i LEFT JOIN rollouts r USING (rollout_id)"
            " WHERE i.intent_id = $1",
            intent_id,
        )
        if rows and rows[0]["state"] in ("planned", "refused"):
            row = rows[0]
            row["plan"] = json.loads(row["plan"]) if row["plan"] else None
            return row
        if time.monotonic() > deadline:
            fail(
                f"intent {intent_id} published, but the planner did not decide within "
                f"{wait_s:g} s; follow it with `lockstep rollout status r-{intent_id.hex[:16]}`",
                1,
            )
        await asyncio.sleep(0.2)


def _submit(
    bundle: str,
    scope: str,
    change_class: str,
    strategy: Path | None,
    approval: str | None,
    dry_run: bool,
    wait_s: float,
    as_json: bool,
) -> None:
    from lockstep_common.events.v1 import IntentSubmitted
    from lockstep_common.vocabulary import ChangeClass

    try:
        klass = ChangeClass(change_class)
    except ValueError:
        fail(f"--class {change_class!r}: use one of {', '.join(c.value for c in ChangeClass)}")
    selector, plan_strategy = _scope(scope), _strategy(strategy)
    stack_hash = run(_resolve(_settings(), bundle))
    data = IntentSubmitted(
        intent_id=uuid.uuid4(),
        stack_hash=stack_hash,
        scope=selector,
        change_class=klass,
        approval_ref=approval,
        submitted_by=getpass.getuser(),
        strategy=plan_strategy,
        dry_run=dry_run,
    )
    _send(data, wait_s, as_json)


def _send(data: IntentSubmitted, wait_s: float, as_json: bool) -> None:
    """Publish the intent, wait for the planner's decision and print it."""
    settings = _settings()
    run(publish_intent(settings, data, 5.0))
    decided = run(await_decision(settings, data.intent_id, wait_s))
    if as_json:
        print(json.dumps(_jsonable({"intent_id": data.intent_id, **decided})))
    elif decided["state"] == "refused":
        console.print(f"[red]refused[/] intent {data.intent_id}:")
        for reason in decided["reasons"]:
            console.print(f"  - {reason}", highlight=False)
    else:
        print_plan(decided)
    if decided["state"] == "refused":
        raise typer.Exit(1)


def print_plan(decided: dict[str, Any], out: Console = console) -> None:
    plan = decided["plan"]
    rid, state = decided["rollout_id"], decided["rollout_state"]
    head = "dry run, nothing released" if decided["dry_run"] else f"state {state}"
    out.print(f"rollout [bold]{rid}[/] ({head}); plan hash {decided['plan_hash']}")
    table = Table(title="waves")
    for column in ("wave", "nodes", "components", "starts (est.)", "gated by (est.)"):
        table.add_column(column)
    times = {e["number"]: e for e in plan["estimates"]}
    for wave in plan["waves"]:
        est = times.get(wave["number"], {})
        table.add_row(
            str(wave["number"]),
            str(len(wave["nodes"])),
            ", ".join(plan["components"].get(str(wave["number"]), []))
            or ", ".join(c for s in wave["stages"] for c in s["components"]),
            _duration(est.get("start_s", 0)),
            _duration(est.get("end_s", 0)),
        )
    fabric = plan.get("fabric") or {}
    for number, wait in sorted(fabric.get("deferred", {}).items(), key=lambda d: int(d[0])):
        nodes = fabric["domains"][wait["domain"]]
        table.add_row(number, str(len(nodes)), f"deferred: {wait['reason']}", "when free", "-")
    out.print(table)
    strata = Table(title="strata covered by the canary, with their control groups")
    for column in ("profile", "supplier", "stack", "canary", "controls"):
        strata.add_column(column, overflow="fold")
    for s in plan["strata"]:
        strata.add_row(
            s["profile"],
            s["supplier"],
            s["stack"][:12],
            _some(s["canary"]),
            _some(s["controls"]) or "(none untouched)",
        )
    out.print(strata)
    excluded: dict[str, int] = {}
    for e in plan["excluded"]:
        excluded[e["reason"]] = excluded.get(e["reason"], 0) + 1
    for reason, n in sorted(excluded.items()):
        out.print(f"excluded: {n} node(s): {reason}", highlight=False)
    out.print(
        f"estimated duration {_duration(plan['makespan_s'])} "
        f"(lower bound {_duration(plan['lower_bound_s'])})"
    )
    if decided["dry_run"]:
        out.print(
            f"start exactly this plan: lockstep rollout start --plan {decided['plan_hash']}",
            highlight=False,
        )


def _some(ids: list[str], shown: int = 6) -> str:
    return ", ".join(ids[:shown]) + (f" and {len(ids) - shown} more" if len(ids) > shown else "")


def _duration(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


BundleOpt = Annotated[str, typer.Option("--bundle", help="Attested bundle: ID\\[@VERSION].")]
ScopeOpt = Annotated[
    str,
    typer.Option(
        "--scope", help="Selector: site=S,pool=P,profile=X,fabric_domain=D,node=N (repeatable)."
    ),
]
ClassOpt = Annotated[
    str, typer.Option("--class", help="emergency, routine, standard or power_fabric.")
]
StrategyOpt = Annotated[
    Path | None, typer.Option("--strategy", help="YAML/JSON strategy overrides.")
]
ApprovalOpt = Annotated[str | None, typer.Option("--approval", help="Change ticket reference.")]


@rollout_app.command("plan")
def rollout_plan(
    bundle: BundleOpt,
    scope: ScopeOpt,
    change_class: ClassOpt,
    strategy: StrategyOpt = None,
    approval: ApprovalOpt = None,
    wait: Wait = 60.0,
    as_json: Json = False,
) -> None:
    """Plan only (a dry run): print the waves, strata, controls and estimated duration."""
    _submit(bundle, scope, change_class, strategy, approval, True, wait, as_json)


PlanOpt = Annotated[
    str | None,
    typer.Option(
        "--plan",
        help="Start exactly a reviewed plan: the JSON `rollout plan --json` printed, or its plan "
        "hash. Its bundle, scope, class and strategy are taken from it; refused, naming the "
        "difference, if the fleet changed since.",
    ),
]


@rollout_app.command("start")
def rollout_start(
    bundle: Annotated[
        str | None, typer.Option("--bundle", help="Attested bundle: ID\\[@VERSION].")
    ] = None,
    scope: Annotated[
        str | None,
        typer.Option(
            "--scope",
            help="Selector: site=S,pool=P,profile=X,fabric_domain=D,node=N (repeatable).",
        ),
    ] = None,
    change_class: Annotated[
        str | None, typer.Option("--class", help="emergency, routine, standard or power_fabric.")
    ] = None,
    strategy: StrategyOpt = None,
    approval: ApprovalOpt = None,
    plan: PlanOpt = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Plan only.")] = False,
    wait: Wait = 60.0,
    as_json: Json = False,
) -> None:
    """Plan and start: the canary is released once the class's approvals are in."""
    if plan is not None:
        given = [
            name
            for name, value in (
                ("--bundle", bundle),
                ("--scope", scope),
                ("--class", change_class),
                ("--strategy", strategy),
                ("--dry-run", dry_run or None),
            )
            if value is not None
        ]
        if given:
            fail(f"--plan starts the reviewed plan as it was asked; leave out {', '.join(given)}")
        _start_reviewed(plan, approval, wait, as_json)
        return
    if bundle is None or scope is None or change_class is None:
        fail("--bundle, --scope and --class are required (or --plan FILE|HASH)")
    _submit(bundle, scope, change_class, strategy, approval, dry_run, wait, as_json)


def _reviewed(plan: str) -> tuple[str, dict[str, Any]]:
    """``--plan FILE|HASH`` -> (plan hash, what its intent asked). A file is what ``rollout plan
    --json`` printed; a hash is looked up among the plans the planner made. Nothing in either is
    trusted: the planner plans the request again and starts it only if the hash comes out the
    same, and the hash covers what was asked (it seeds the plan)."""
    import re

    path = Path(plan)
    if re.fullmatch(r"[0-9a-f]{64}", plan) and not path.exists():
        rows = run(
            _fetch(
                _settings(),
                "SELECT plan FROM rollouts WHERE plan_hash = $1 ORDER BY created_at DESC LIMIT 1",
                plan,
            )
        )
        if not rows:
            fail(f"--plan: no plan with hash {plan} (review one with `lockstep rollout plan`)", 1)
        return plan, json.loads(rows[0]["plan"]).get("intent") or {}
    try:
        doc = json.loads(path.read_text())
    except OSError as exc:
        fail(f"--plan {plan}: neither a plan hash nor a readable file: {exc.strerror or exc}")
    except ValueError as exc:
        fail(f"--plan {plan}: not the JSON `lockstep rollout plan --json` prints: {exc}")
    if not isinstance(doc, dict) or not isinstance(doc.get("plan"), dict):
        fail(f"--plan {plan}: not the JSON `lockstep rollout plan --json` prints (no plan)")
    hash_ = doc.get("plan_hash")
    if not isinstance(hash_, str) or not re.fullmatch(r"[0-9a-f]{64}", hash_):
        fail(f"--plan {plan}: plan_hash missing or not 64 lower-case hex digits")
    return hash_, doc["plan"].get("intent") or {}


def _start_reviewed(plan: str, approval: str | None, wait_s: float, as_json: bool) -> None:
    from pydantic import ValidationError

    from lockstep_common.events.v1 import IntentSubmitted

    plan_hash, asked = _reviewed(plan)
    try:
        data = IntentSubmitted.model_validate(
            {
                **asked,
                "intent_id": str(uuid.uuid4()),
                "approval_ref": approval,
                "submitted_by": getpass.getuser(),
                "plan_hash": plan_hash,
            },
            strict=False,
        )
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "(root)"
        fail(f"--plan {plan}: what the plan asked is not an intent: {where}: {err['msg']}")
    _send(data, wait_s, as_json)


# --- status / audit -----------------------------------------------------------------------------


def _status(settings: Settings, rollout_id: str) -> dict[str, Any] | None:
    """The rollout as the planner answers ``rollout.status`` (JSON); None when it knows none."""
    from lockstep_cli.ops_client import ask
    from lockstep_common.events.v1 import RolloutStatusAnswered, RolloutStatusRequested

    request = _request(lambda: RolloutStatusRequested(rollout_id=rollout_id))
    answer = ask(
        settings, "planner", "rollout.status", request, RolloutStatusAnswered, not_found_exit=1
    )
    if answer.rollout is not None:
        return answer.rollout.model_dump(mode="json")
    if answer.intent is not None:
        return {"rollout_id": rollout_id, "intent": answer.intent.model_dump(mode="json")}
    return None


def _request(make: Callable[[], T]) -> T:
    """A request from the command line; bad input is one line naming it (exit 2)."""
    from pydantic import ValidationError

    try:
        return make()
    except ValidationError as exc:
        err = exc.errors()[0]
        fail(f"{'.'.join(str(p) for p in err['loc']) or '(input)'}: {err['msg']}")


ENDED = frozenset({"completed", "aborted"})
"""Rollout states a watch ends on (halted and paused wait for a human: watching goes on)."""
WATCH_POLL_S = 1.0


@rollout_app.command("status")
def rollout_status(
    rollout: RolloutArg,
    as_json: Json = False,
    watch: Annotated[
        bool,
        typer.Option(
            "--watch",
            help="Follow it until it completes or is aborted: redrawn in place on a terminal, "
            "a line per change otherwise (Ctrl-C stops watching, not the rollout).",
        ),
    ] = False,
) -> None:
    """Where a rollout is: its state, each wave's state and gate, nodes by last device step."""
    settings = _settings()
    doc = _status(settings, rollout)
    if doc is None:
        fail(f"no rollout {rollout}", 1)
    if as_json and not watch:
        print(json.dumps(_jsonable(doc)))
        return
    if "intent" in doc:
        if as_json:
            print(json.dumps(_jsonable(doc)))
            return
        intent = doc["intent"]
        console.print(f"intent {intent['intent_id']} is {intent['state']}; no rollout")
        for reason in intent["reasons"]:
            console.print(f"  - {reason}", highlight=False)
        return
    if not watch:
        console.print(_status_view(doc))
        return
    try:
        run(_watch(settings, rollout, doc, as_json=as_json))
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


def _status_view(doc: dict[str, Any]) -> Group:
    head = (
        f"rollout [bold]{doc['rollout_id']}[/] {doc['state']} ({doc['change_class']}, stack "
        f"{doc['stack_hash'][:12]}, approvals {len(doc['approvals'])}/{doc['approvals_needed']})"
        + (f": {doc['reason']}" if doc["reason"] else "")
    )
    table = Table()
    for column in ("wave", "state", "nodes", "succeeded", "failed", "gate", "components"):
        table.add_column(column)
    for w in doc["waves"]:
        wait = doc["deferred"].get(str(w["number"]))
        table.add_row(
            str(w["number"]),
            f"{w['state']} (deferred: {wait['domain']})"
            if wait and w["state"] == "pending"
            else w["state"],
            str(w["nodes"]),
            str(w["succeeded"]),
            str(w["failed"]),
            "passed" if w["gate_passed"] else "-",
            ", ".join(w["components"]),
        )
    steps = ", ".join(f"{k} {v}" for k, v in doc["nodes_by_step"].items())
    return Group(Text.from_markup(head), table, Text(f"nodes by last step: {steps or '(none)'}"))


def _summary(doc: dict[str, Any]) -> str:
    """One line of what changed: state, each wave's state and counts, nodes by step."""
    waves = " ".join(
        f"w{w['number']}:{w['state']}({w['succeeded']}+{w['failed']}/{w['nodes']})"
        for w in doc["waves"]
    )
    steps = ",".join(f"{k}={v}" for k, v in doc["nodes_by_step"].items())
    return f"{doc['state']} {waves} steps {steps or '-'}"


async def _watch(settings: Settings, rollout: str, doc: dict[str, Any], *, as_json: bool) -> None:
    """Ask the planner again until the rollout ends: a view redrawn in place on a terminal,
    otherwise a line (or, with --json, a document) each time the summary changes."""
    from rich.live import Live

    last: str | None = None
    with contextlib.ExitStack() as stack:
        live = None
        if not as_json and console.is_terminal:
            live = stack.enter_context(Live(_status_view(doc), console=console, auto_refresh=False))
        while True:
            summary = _summary(doc)
            if live is not None:
                live.update(_status_view(doc), refresh=True)
            elif summary != last:
                if as_json:
                    print(json.dumps(_jsonable(doc)), flush=True)
                else:
                    stamp = time.strftime("%H:%M:%S")
                    console.print(f"{stamp} {doc['rollout_id']} {summary}", highlight=False)
            last = summary
            if doc["state"] in ENDED:
                return
            await asyncio.sleep(WATCH_POLL_S)
            doc = _status(settings, rollout) or doc


@rollout_app.command("audit")
def rollout_audit(rollout: RolloutArg, as_json: Json = False) -> None:
    """Every decision about a rollout, oldest first: when, who, what, why (the planner
    answers)."""
    from lockstep_cli.ops_client import ask
    from lockstep_common.events.v1 import RolloutAuditAnswered, RolloutAuditRequested

    request = _request(lambda: RolloutAuditRequested(rollout_id=rollout))
    rows = ask(
        _settings(), "planner", "rollout.audit", request, RolloutAuditAnswered, not_found_exit=1
    ).entries
    if as_json:
        print(json.dumps([r.model_dump(mode="json") for r in rows]))
        return
    table = Table(title=f"audit trail of {rollout}")
    for column in ("when", "who", "what", "why"):
        table.add_column(column, overflow="fold")
    for r in rows:
        table.add_row(r.at.isoformat(timespec="seconds"), r.actor, r.action, r.detail)
    console.print(table)


# --- pause / resume / abort ---------------------------------------------------------------------


def run_command(
    settings: Settings,
    rollout_id: str,
    action: str,
    by: str,
    reason: str,
    wait_s: float,
    key: Path | None = None,
) -> str:
    """Ask the planner to carry out ``action`` (``rollout.control``); its outcome, or
    ``queued...`` when it has not carried it out yet. An approval is signed here, over the plan
    hash the planner reports (``rollout.status``): the key never leaves this machine."""
    from lockstep_cli.ops_client import ask
    from lockstep_common.events.v1 import RolloutControlAnswered, RolloutControlRequested

    approval = None
    if key is not None:
        doc = _status(settings, rollout_id)
        if doc is None or "plan_hash" not in doc:
            fail(f"no rollout {rollout_id}", 1)
        approval = _signed(key, by, rollout_id, str(doc["plan_hash"]))
    request = _request(
        lambda: RolloutControlRequested(
            rollout_id=rollout_id, action=action, by=by, reason=reason, approval=approval
        )
    )
    answer = ask(
        settings,
        "planner",
        "rollout.control",
        request,
        RolloutControlAnswered,
        timeout_s=max(wait_s, 1.0),
        not_found_exit=1,
    )
    if answer.outcome == "queued":
        return "queued: the planner has not carried it out yet (is it running?)"
    return answer.outcome


def _signed(key: Path, approver: str, rollout_id: str, plan_hash: str) -> str:
    """The approval record: ``approver``'s Ed25519 signature over the rollout's plan hash."""
    import base64

    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    from lockstep_planner.domain.approvals import approval_message

    try:
        private = load_pem_private_key(key.read_bytes(), password=None)
    except OSError as exc:
        fail(f"--key {key}: {exc.strerror or exc}")
    except (TypeError, ValueError) as exc:
        fail(f"--key {key}: not an unencrypted PEM private key: {exc}")
    if not isinstance(private, Ed25519PrivateKey):
        fail(f"--key {key}: not an Ed25519 key ({type(private).__name__})")
    signature = private.sign(approval_message(rollout_id, plan_hash))
    return json.dumps(
        {
            "approver": approver,
            "plan_hash": plan_hash,
            "signature": base64.b64encode(signature).decode(),
        }
    )


def _control(
    rollout: str,
    action: str,
    by: str | None,
    reason: str,
    wait: float,
    key: Path | None = None,
) -> None:
    who = by or getpass.getuser()
    outcome = run_command(_settings(), rollout, action, who, reason, wait, key)
    if outcome.startswith("done"):
        console.print(f"{rollout}: {action} {outcome}")
        return
    fail(f"{rollout}: {action} {outcome}", 1)


@rollout_app.command("approve")
def rollout_approve(
    rollout: RolloutArg,
    key: Annotated[Path, typer.Option("--key", help="The approver's Ed25519 private key (PEM).")],
    by: Annotated[
        str | None,
        typer.Option("--as", help="Approver name in the trust store (default: login name)."),
    ] = None,
    wait: Wait = 30.0,
) -> None:
    """Sign the rollout's current plan hash; once the class's approvals are in, it starts.
    A changed plan needs a new approval; a replayed or forged one is refused."""
    _control(rollout, "approve", by, "", wait, key)


@rollout_app.command("pause")
def rollout_pause(
    rollout: RolloutArg, by: By = None, reason: Reason = "", wait: Wait = 30.0
) -> None:
    """No new wave until resumed; the wave in flight finishes."""
    _control(rollout, "pause", by, reason, wait)


@rollout_app.command("resume")
def rollout_resume(
    rollout: RolloutArg, by: By = None, reason: Reason = "", wait: Wait = 30.0
) -> None:
    """Carry on; a wave held by an inconclusive gate is accepted by whoever resumes."""
    _control(rollout, "resume", by, reason, wait)


@rollout_app.command("abort")
def rollout_abort(
    rollout: RolloutArg, by: By = None, reason: Reason = "", wait: Wait = 30.0
) -> None:
    """Stop for good: new work stops, in-flight device steps finish (rollout.halted)."""
    _control(rollout, "abort", by, reason, wait)
