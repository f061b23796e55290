"""``lockstep rollout plan|start|list|status|pause|resume|abort|approve|audit``: rollouts, for
operators.

Every command asks the planner over the bus (``ops.<identity>.planner.rollout.<command>``,
``lockstep_cli.ops_client``); none reads or writes its tables, and none needs a database DSN.
``plan`` is a dry run the planner answers without storing or publishing anything; ``start`` is
a write whose request id becomes the intent's id (a retried request is the same intent and gets
the same decision), and its reply is the planner's decision: planned (running, or awaiting the
class's approvals), or refused naming every reason. A plan comes as its summary; its node lists
(``--json``) a page at a time, because a 12,500-node plan is over NATS's 1 MiB. The bundle is
named as ``ID[@VERSION]`` and resolved by the planner among the bundles it has seen attested.
Controls (pause, resume, abort, approve) are carried out by the planner's worker and their
outcome is the reply; ``status``, ``audit`` and ``list`` read.
Exit codes: 0 done, 1 refused or not found, 2 bad input, 3 no answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import json
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.console import Group
from rich.table import Table
from rich.text import Text

from lockstep_cli.cli_io import fail, run, settings_of, stdout_console

if TYPE_CHECKING:
    from rich.console import Console

    from lockstep_common.events.v1 import (
        PlanAsk,
        PlanSummary,
        RolloutPlanRequested,
        ScopeSelector,
        Strategy,
    )
    from lockstep_common.settings import ServiceSettings

T = TypeVar("T")
rollout_app = typer.Typer(
    help="Rollouts: plan, start, list, follow, pause, resume, abort, audit.",
    no_args_is_help=True,
)
console = stdout_console()
Json = Annotated[bool, typer.Option("--json", help="Print JSON only.")]
RolloutArg = Annotated[str, typer.Argument(help="Rollout id (r-...).")]
Wait = Annotated[float, typer.Option("--wait", help="Seconds to wait for the planner.")]
By = Annotated[str | None, typer.Option("--by", help="Who asks (default: the login name).")]
Reason = Annotated[str, typer.Option("--reason", help="Why, for the audit trail.")]
HASH = re.compile(r"[0-9a-f]{64}")
PLANNER = "planner"


def _settings() -> ServiceSettings:
    """Where the planner is asked: the bus settings only (``LOCKSTEP_NATS_*``, namespace)."""
    from pydantic_settings import SettingsConfigDict

    from lockstep_common.settings import ServiceSettings

    class Operator(ServiceSettings):
        model_config = SettingsConfigDict(
            env_prefix="LOCKSTEP_CLI_", extra="forbid", validate_default=True, populate_by_name=True
        )

    return settings_of(Operator)


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


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
    from lockstep_common.scopes import SelectorError, parse_selector

    try:
        return parse_selector(text)
    except SelectorError as exc:
        fail(f"--scope: {exc}")


def _ask(bundle: str, scope: str, change_class: str, strategy: Path | None) -> PlanAsk:
    """What to plan, from the command line; bad input is one line naming the option."""
    from lockstep_common.events.v1 import BUNDLE_REF_PATTERN, PlanAsk
    from lockstep_common.vocabulary import ChangeClass

    try:
        klass = ChangeClass(change_class)
    except ValueError:
        fail(f"--class {change_class!r}: use one of {', '.join(c.value for c in ChangeClass)}")
    selector, plan_strategy = _scope(scope), _strategy(strategy)
    if not re.fullmatch(BUNDLE_REF_PATTERN, bundle):
        fail(f"--bundle {bundle!r}: not a bundle reference (ID[@VERSION])")
    return _request(
        lambda: PlanAsk(bundle=bundle, scope=selector, change_class=klass, strategy=plan_strategy)
    )


def _plan_pages(
    settings: ServiceSettings, make: Callable[[int | None], RolloutPlanRequested], wait_s: float
) -> tuple[PlanSummary | None, tuple[str, ...], list[tuple[str, int]]]:
    """The plan's summary (or the reasons it cannot be made) and, when ``make`` asks pages,
    where every node goes. Every page must come from the same plan (a dry run is planned again
    for each page: a fleet that changed meanwhile is an error, not a mix of two plans)."""
    from lockstep_cli.ops_client import ask
    from lockstep_common.events.v1 import RolloutPlanAnswered

    first = ask(
        settings, PLANNER, "rollout.plan", make(0), RolloutPlanAnswered,
        timeout_s=wait_s, not_found_exit=1,
    )  # fmt: skip
    if first.plan is None:
        return None, first.reasons, []
    places = list(zip(first.nodes, first.places, strict=True))
    after = first.next_offset
    while after is not None:
        page = ask(
            settings, PLANNER, "rollout.plan", make(after), RolloutPlanAnswered,
            timeout_s=wait_s, not_found_exit=1,
        )  # fmt: skip
        if page.plan is None or page.plan.plan_hash != first.plan.plan_hash:
            fail("the plan changed while its pages were read (the fleet changed): ask again", 1)
        places.extend(zip(page.nodes, page.places, strict=True))
        after = page.next_offset
    return first.plan, (), places


def plan_document(
    summary: PlanSummary, places: list[tuple[str, int]] | None, **head: Any
) -> dict[str, Any]:
    """What ``--json`` prints of a plan: the summary with, when its pages were read, each
    wave's nodes and each exclusion's node (``plan.waves[i].nodes``, ``plan.excluded``)."""
    plan = summary.model_dump(mode="json")
    plan["intent"] = plan.pop("ask")
    if places is not None:
        by_wave: dict[int, list[str]] = {}
        excluded = []
        for node, place in places:
            if place >= 0:
                by_wave.setdefault(place, []).append(node)
            else:
                excluded.append({"node": node, "reason": summary.excluded[-1 - place].reason})
        for wave in plan["waves"]:
            wave["nodes"], wave["node_count"] = by_wave.get(wave["number"], []), wave["nodes"]
        plan["excluded_counts"], plan["excluded"] = plan["excluded"], excluded
    return {**head, "plan_hash": summary.plan_hash, "plan": plan}


def _print_refused(what: str, reasons: tuple[str, ...] | list[str]) -> None:
    console.print(f"[red]refused[/] {what}:")
    for reason in reasons:
        console.print(f"  - {reason}", highlight=False)


def _plan(
    bundle: str,
    scope: str,
    change_class: str,
    strategy: Path | None,
    wait_s: float,
    as_json: bool,
) -> None:
    """A dry run: the plan the planner would make now; nothing stored or published."""
    from lockstep_common.events.v1 import RolloutPlanRequested

    asked = _ask(bundle, scope, change_class, strategy)
    settings = _settings()
    summary, reasons, places = _plan_pages(
        settings,
        lambda offset: RolloutPlanRequested(ask=asked, offset=offset if as_json else None),
        wait_s,
    )
    if summary is None:
        if as_json:
            print(json.dumps({"state": "refused", "dry_run": True, "reasons": list(reasons)}))
        else:
            _print_refused("plan", reasons)
        raise typer.Exit(1)
    if as_json:
        doc = plan_document(summary, places, state="planned", dry_run=True, reasons=[])
        print(json.dumps(_jsonable(doc)))
        return
    print_plan(summary, "dry run, nothing stored or released")
    again = f"--bundle {bundle} --scope {scope or chr(39) * 2} --class {change_class}"
    again += f" --strategy {strategy}" if strategy is not None else ""
    console.print(
        f"start exactly this plan: lockstep rollout start --plan {summary.plan_hash} {again}",
        highlight=False,
    )


def start_rollout(
    settings: ServiceSettings,
    asked: PlanAsk | None,
    *,
    plan_hash: str | None = None,
    approval: str | None = None,
    by: str | None = None,
    wait_s: float = 60.0,
    with_nodes: bool = True,
) -> dict[str, Any]:
    """Ask the planner to plan and start (``rollout.start``); its decision as a document:
    ``state`` planned, refused or pending, with the plan (``plan_document``) when planned."""
    from lockstep_cli.ops_client import ask
    from lockstep_common.events.v1 import (
        RolloutPlanRequested,
        RolloutStartAnswered,
        RolloutStartRequested,
    )

    request = _request(
        lambda: RolloutStartRequested(
            ask=asked, plan_hash=plan_hash, approval_ref=approval, by=by or getpass.getuser()
        )
    )
    answer = ask(
        settings, PLANNER, "rollout.start", request, RolloutStartAnswered,
        timeout_s=max(wait_s, 1.0), not_found_exit=1,
    )  # fmt: skip
    head = {
        "intent_id": str(answer.intent_id),
        "rollout_id": answer.rollout_id,
        "state": answer.decision,
        "rollout_state": answer.state,
        "approvals_needed": answer.approvals_needed,
        "reasons": list(answer.reasons),
        "dry_run": False,
    }
    if answer.plan is None:
        return head
    places = None
    if with_nodes:
        rollout_id = answer.rollout_id
        _, _, places = _plan_pages(
            settings,
            lambda offset: RolloutPlanRequested(rollout_id=rollout_id, offset=offset),
            wait_s,
        )
    return {**plan_document(answer.plan, places, **head), "summary": answer.plan}


def _start(
    asked: PlanAsk | None,
    plan_hash: str | None,
    approval: str | None,
    wait_s: float,
    as_json: bool,
) -> None:
    decided = start_rollout(
        _settings(), asked, plan_hash=plan_hash, approval=approval, wait_s=wait_s,
        with_nodes=as_json,
    )  # fmt: skip
    summary = decided.pop("summary", None)
    if as_json:
        print(json.dumps(_jsonable(decided)))
    elif decided["state"] == "refused":
        _print_refused(f"intent {decided['intent_id']}", decided["reasons"])
    elif decided["state"] == "pending":
        console.print(
            f"intent {decided['intent_id']} recorded, not decided yet: "
            f"{'; '.join(decided['reasons'])}; follow it with "
            f"`lockstep rollout status {decided['rollout_id']}`",
            highlight=False,
        )
    else:
        state = decided["rollout_state"]
        if state == "planned" and decided["approvals_needed"]:
            state = f"planned, awaiting {decided['approvals_needed']} signed approval(s)"
        print_plan(summary, f"state {state}", rollout_id=decided["rollout_id"])
    if decided["state"] != "planned":
        raise typer.Exit(1)


def print_plan(
    summary: PlanSummary, head: str, out: Console = console, rollout_id: str | None = None
) -> None:
    """A plan as the operator reads it: its waves, strata with their controls, exclusions."""
    what = f"rollout [bold]{rollout_id}[/]" if rollout_id else "plan"
    out.print(f"{what} of {summary.bundle} ({head}); plan hash {summary.plan_hash}")
    table = Table(title="waves")
    for column in ("wave", "nodes", "components", "starts (est.)", "gated by (est.)"):
        table.add_column(column)
    for wave in summary.waves:
        table.add_row(
            str(wave.number),
            str(wave.nodes),
            ", ".join(wave.components),
            _duration(wave.start_s),
            _duration(wave.end_s),
        )
    for deferred in summary.deferred:
        table.add_row(
            str(deferred.number),
            str(deferred.nodes),
            f"deferred: {deferred.reason}",
            "when free",
            "-",
        )
    out.print(table)
    strata = Table(title="strata covered by the canary, with their control groups")
    for column in ("profile", "supplier", "stack", "canary", "controls"):
        strata.add_column(column, overflow="fold")
    for s in summary.strata:
        strata.add_row(
            s.profile,
            s.supplier,
            s.stack[:12],
            _some(s.canary, s.canary_count),
            _some(s.controls, s.controls_count) or "(none untouched)",
        )
    out.print(strata)
    for e in sorted(summary.excluded, key=lambda e: e.reason):
        out.print(f"excluded: {e.nodes} node(s): {e.reason}", highlight=False)
    out.print(
        f"estimated duration {_duration(summary.makespan_s)} "
        f"(lower bound {_duration(summary.lower_bound_s)})"
    )


def _some(ids: Sequence[str], count: int, shown: int = 6) -> str:
    """The first ``shown`` of ``ids`` and how many more of ``count`` there are (an answer may
    name fewer ids than it counts)."""
    named = list(ids[:shown])
    more = count - len(named)
    return ", ".join(named) + (f" and {more} more" if more > 0 else "")


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
    wait: Wait = 60.0,
    as_json: Json = False,
) -> None:
    """Plan only (a dry run): print the waves, strata, controls and estimated duration. The
    planner stores and publishes nothing; the same request over the same fleet is the same
    plan and plan hash."""
    _plan(bundle, scope, change_class, strategy, wait, as_json)


PlanOpt = Annotated[
    str | None,
    typer.Option(
        "--plan",
        help="Start exactly a reviewed plan: the JSON `rollout plan --json` printed, or its plan "
        "hash (with the --bundle, --scope, --class and --strategy it was planned from, or alone "
        "for a plan the planner made a rollout of); refused, naming the difference, if the "
        "fleet changed since.",
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
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Plan only (`rollout plan`).")] = False,
    wait: Wait = 60.0,
    as_json: Json = False,
) -> None:
    """Plan and start: the planner answers with its decision; the canary is released once the
    class's approvals are in."""
    asked = None
    if bundle is not None or scope is not None or change_class is not None or strategy:
        if bundle is None or scope is None or change_class is None:
            fail("--bundle, --scope and --class are required (or --plan FILE|HASH)")
        if dry_run:
            if plan is not None or approval is not None:
                fail("--dry-run only plans the request; leave out --plan and --approval")
            _plan(bundle, scope, change_class, strategy, wait, as_json)
            return
        asked = _ask(bundle, scope, change_class, strategy)
    if plan is None:
        if asked is None:
            fail("--bundle, --scope and --class are required (or --plan FILE|HASH)")
        _start(asked, None, approval, wait, as_json)
        return
    if dry_run:
        fail("--plan starts the reviewed plan; leave out --dry-run")
    if HASH.fullmatch(plan) and not Path(plan).exists():
        _start(asked, plan, approval, wait, as_json)
        return
    if asked is not None:
        fail("--plan FILE starts the reviewed plan as it was asked; leave out --bundle, "
             "--scope, --class and --strategy")  # fmt: skip
    plan_hash, asked = _reviewed(plan)
    _start(asked, plan_hash, approval, wait, as_json)


def _reviewed(plan: str) -> tuple[str, PlanAsk]:
    """``--plan FILE`` -> (plan hash, what it was planned from). The file is what ``rollout
    plan --json`` printed. Nothing in it is trusted: the planner plans the request again and
    starts it only if the hash comes out the same, and the hash covers what was asked (it seeds
    the plan)."""
    from pydantic import ValidationError

    from lockstep_common.events.v1 import PlanAsk

    path = Path(plan)
    try:
        doc = json.loads(path.read_text())
    except OSError as exc:
        fail(f"--plan {plan}: neither a plan hash nor a readable file: {exc.strerror or exc}")
    except ValueError as exc:
        fail(f"--plan {plan}: not the JSON `lockstep rollout plan --json` prints: {exc}")
    if not isinstance(doc, dict) or not isinstance(doc.get("plan"), dict):
        fail(f"--plan {plan}: not the JSON `lockstep rollout plan --json` prints (no plan)")
    hash_ = doc.get("plan_hash")
    if not isinstance(hash_, str) or not HASH.fullmatch(hash_):
        fail(f"--plan {plan}: plan_hash missing or not 64 lower-case hex digits")
    asked = doc["plan"].get("intent") or {}
    try:
        return hash_, PlanAsk.model_validate(asked, strict=False)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "(root)"
        fail(f"--plan {plan}: what the plan asked is not a plan request: {where}: {err['msg']}")


@rollout_app.command("list")
def rollout_list(
    state: Annotated[
        str | None, typer.Option("--state", help="Only rollouts in this state, e.g. running.")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="Show at most this many.")] = 50,
    as_json: Json = False,
) -> None:
    """Rollouts, newest first, with their state (dry runs are not rollouts)."""
    from lockstep_cli.ops_client import pages
    from lockstep_common.events.v1 import (
        MAX_ROLLOUTS_PAGE,
        RolloutListAnswered,
        RolloutListRequested,
    )

    shown: list[Any] = []
    for page in pages(
        _settings(),
        PLANNER,
        "rollout.list",
        lambda before: _request(
            lambda: RolloutListRequested(
                before=before, state=state, limit=min(MAX_ROLLOUTS_PAGE, limit - len(shown))
            )
        ),
        RolloutListAnswered,
        lambda page: page.next_before if len(shown) < limit else None,
    ):
        shown.extend(page.rollouts)
    if as_json:
        print(json.dumps([r.model_dump(mode="json") for r in shown]))
        return
    table = Table(title="rollouts, newest first")
    for column in ("rollout", "state", "class", "bundle", "nodes", "approvals", "planned at"):
        table.add_column(column, overflow="fold")
    for r in shown:
        table.add_row(
            r.rollout_id,
            r.state,
            r.change_class,
            r.bundle,
            str(r.nodes),
            f"{r.approvals}/{r.approvals_needed}",
            r.created_at.isoformat(timespec="seconds"),
        )
    console.print(table)


# --- status / audit -----------------------------------------------------------------------------


def _status(settings: ServiceSettings, rollout_id: str) -> dict[str, Any] | None:
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
    """Where a rollout is: its state, each wave's state and gate, nodes by last device step, and
    the plan's strata with their size, canary and control nodes."""
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
    strata = Table(title="strata, canary and control nodes")
    for column in ("profile", "supplier", "stack", "size", "canary", "controls"):
        strata.add_column(column, overflow="fold")
    for st in doc.get("strata", []):
        strata.add_row(  # Text: a service's strings are shown, never read as markup
            Text(st["profile"]),
            Text(st["supplier"]),
            Text(st["stack"][:12]),
            "-" if st.get("size") is None else str(st["size"]),
            Text(f"{st['canary_count']}: {_some(st['canary'], st['canary_count'])}"),
            Text(f"{st['controls_count']}: {_some(st['controls'], st['controls_count'])}"),
        )
    shown: list[Text | Table] = [Text.from_markup(head), table]
    shown.append(Text(f"nodes by last step: {steps or '(none)'}"))
    return Group(*shown, *([strata] if doc.get("strata") else []))


def _summary(doc: dict[str, Any]) -> str:
    """One line of what changed: state, each wave's state and counts, nodes by step."""
    waves = " ".join(
        f"w{w['number']}:{w['state']}({w['succeeded']}+{w['failed']}/{w['nodes']})"
        for w in doc["waves"]
    )
    steps = ",".join(f"{k}={v}" for k, v in doc["nodes_by_step"].items())
    return f"{doc['state']} {waves} steps {steps or '-'}"


async def _watch(
    settings: ServiceSettings, rollout: str, doc: dict[str, Any], *, as_json: bool
) -> None:
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
    settings: ServiceSettings,
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

    from lockstep_common.approvals import approval_message

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
