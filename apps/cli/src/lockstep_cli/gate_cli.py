"""``lockstep gate evaluate``: the healthgate's judge on a recorded sample file, for SREs and tests;
``lockstep gate show``: why a live gate decided what it did (the persisted verdicts, read-only).
``lockstep bench gate`` (lockstep_bench.cli) measures how fast and how good that judge is.

``evaluate`` runs exactly the judge the service runs (``lockstep_healthgate.domain.judge``), as of
the last sample's time unless ``--at`` says otherwise, so a verdict can be re-derived from the
samples that produced it. Exit codes: 0 passed, 1 tripped, 3 inconclusive, 2 bad input.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from lockstep_cli.cli_io import fail, run, settings_of, stdout_console

if TYPE_CHECKING:
    import asyncpg

    from lockstep_healthgate.domain.decision import GateDecision
    from lockstep_healthgate.store import VerdictRecord

gate_app = typer.Typer(
    help="Health gate: replay the judge on recorded samples, or show a live gate's verdicts.",
    no_args_is_help=True,
)
console = stdout_console()
EXIT = {"passed": 0, "tripped": 1, "inconclusive": 3}


def _when(raw: str) -> datetime:
    try:
        when = datetime.fromisoformat(raw)
    except ValueError:
        fail(f"--at {raw!r} is not an ISO 8601 time")
    if when.tzinfo is None:
        fail(f"--at {raw!r} has no time zone")
    return when


def _show(decision: GateDecision) -> None:
    colour = {"passed": "green", "tripped": "red", "inconclusive": "yellow"}[decision.verdict]
    console.print(
        f"[bold {colour}]{decision.verdict.upper()}[/]  score {decision.score:g}  "
        f"as of {datetime.fromtimestamp(decision.evaluated_at, UTC).isoformat()}",
        highlight=False,
    )
    console.print(decision.reason, highlight=False, markup=False, soft_wrap=True)
    if decision.rules:
        rules = Table(title="hard rules broken by canary nodes")
        for col in ("rule", "stratum", "canary", "control", "environmental"):
            rules.add_column(col)
        for r in decision.rules:
            rules.add_row(
                r.rule,
                escape(r.stratum),
                f"{len(r.nodes)}/{r.canary_nodes}",
                f"{r.control_hits}/{r.control_nodes}",
                "yes" if r.environmental else "no",
            )
        console.print(rules)
        for r in decision.rules:
            console.print(
                f"{r.rule} [{r.stratum}]: {r.detail}", highlight=False, markup=False, soft_wrap=True
            )
    if not decision.metrics:
        _tail(decision)
        return
    metrics = Table(title="metrics: canary vs control, one value per node (* critical)")
    metrics.add_column("metric", no_wrap=True)
    for col in (
        "stratum",
        "outcome",
        "canary (n)",
        "control (n)",
        "shift [interval]",
        "floor",
        "p",
    ):
        metrics.add_column(col)
    for j in decision.metrics:
        c = j.comparison
        name = j.metric + ("*" if j.critical else "")
        if c is None:
            metrics.add_row(name, escape(j.stratum), j.outcome, "", "", "", "", "")
            continue
        metrics.add_row(
            name,
            escape(j.stratum),
            j.outcome,
            f"{c.canary_median:.4g} ({c.canary_nodes})",
            f"{c.control_median:.4g} ({c.control_nodes})",
            f"{c.shift:.4g} [{c.low:.4g}, {c.high:.4g}]",
            f"{c.floor:.4g}",
            "" if c.p_value is None else f"{c.p_value:.2g}",
        )
    console.print(metrics)
    for j in decision.metrics:
        if j.outcome in ("environmental", "no_data", "worse"):
            console.print(
                f"{j.metric} [{j.stratum}] {j.outcome}: {j.detail}",
                highlight=False,
                markup=False,
                soft_wrap=True,
            )
    _tail(decision)


def _tail(decision: GateDecision) -> None:
    if decision.offending_nodes:
        console.print(
            "offending nodes: " + ", ".join(decision.offending_nodes),
            highlight=False,
            markup=False,
            soft_wrap=True,
        )
    for note in decision.notes:
        console.print(f"note: {note}", highlight=False, markup=False, soft_wrap=True)


@gate_app.command("evaluate")
def gate_evaluate(
    samples: Annotated[
        Path,
        typer.Option(
            "--samples",
            help="JSON or CSV rows: node, group (canary|control), metric, value, time "
            "[, stratum, phase (soak|baseline)].",
        ),
    ],
    policy: Annotated[
        Path | None,
        typer.Option("--policy", help="Policy file (TOML, or JSON if it ends in .json)."),
    ] = None,
    at: Annotated[
        str | None,
        typer.Option("--at", help="Evaluate as of this ISO 8601 time (default: last sample)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the decision as JSON.")] = False,
) -> None:
    """Judge a recorded sample set: verdict and per-metric evidence.

    Exit 0 passed, 1 tripped, 3 inconclusive, 2 bad input.
    """
    from lockstep_healthgate.domain.judge import evaluate
    from lockstep_healthgate.domain.policy import PolicyError
    from lockstep_healthgate.policy_files import default_policy, load_policy
    from lockstep_healthgate.sample_files import SampleFileError, read_samples

    try:
        rules = load_policy(policy) if policy else default_policy()
        table = read_samples(samples)
    except (PolicyError, SampleFileError) as exc:
        fail(str(exc))
    now = _when(at) if at else datetime.fromtimestamp(float(table.time.max()), UTC)
    decision = evaluate(table, rules, now=now)
    if as_json:
        print(json.dumps(decision.model_dump(mode="json")))
    else:
        _show(decision)
    raise typer.Exit(EXIT[decision.verdict])


@asynccontextmanager
async def healthgate_tables(what: str) -> AsyncIterator[asyncpg.Connection]:
    """A connection to the healthgate's schema, straight from its tables: read-only, never
    migrating (as ``lockstep dlq`` reads dead letters); a schema without the table ``what``
    needs is one line."""
    import asyncpg

    from lockstep_common import db
    from lockstep_healthgate.app import NAME
    from lockstep_healthgate.settings import Settings

    settings = settings_of(Settings)
    conn = await db.connect_with_retry(settings.database_url, attempts=3)
    try:
        schema = settings.db_schema or NAME  # as ServiceApp names it
        await conn.execute(f"SET search_path TO {db.quote_ident(schema)}")
        try:
            yield conn
        except asyncpg.UndefinedTableError:
            fail(f"schema {schema} has no {what} table: has the healthgate service run?")
    finally:
        await conn.close()


async def _verdicts(rollout: str, wave: int | None) -> list[VerdictRecord]:
    """The healthgate's persisted verdicts."""
    from lockstep_healthgate.adapters.pg_store import read_verdicts

    async with healthgate_tables("gate verdicts") as conn:
        return await read_verdicts(conn, rollout, wave)


def _record_json(v: VerdictRecord) -> dict[str, Any]:
    return {
        "rollout_id": v.rollout_id,
        "wave": v.wave,
        "verdict": v.decision.verdict.value,
        "kind": v.kind,
        "reason": v.decision.reason,
        "window_start": v.window_start.isoformat(),
        "window_end": v.window_end.isoformat(),
        "policy_digest": v.policy_digest,
        "event_id": str(v.event_id),
        "decision": v.decision.model_dump(mode="json"),
    }


@gate_app.command("show")
def gate_show(
    rollout: Annotated[str, typer.Argument(help="Rollout id.")],
    wave: Annotated[int | None, typer.Option("--wave", min=0, help="Only this wave.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the verdicts as JSON.")] = False,
) -> None:
    """Why a live gate decided what it did: each wave's verdict, how it was reached (a hard rule
    at once, or the judge after the soak), the window judged and the per-metric evidence.

    Exit 0 shown, 1 no verdict yet, 2 bad input or an unreachable database.
    """
    from lockstep_common.subjects import token

    try:
        token(rollout, "rollout id")
    except ValueError as exc:
        fail(escape(str(exc)))
    records = run(_verdicts(rollout, wave))
    if as_json:
        print(json.dumps([_record_json(v) for v in records]))
    if not records:
        where = f" wave {wave}" if wave is not None else ""
        if not as_json:
            console.print(f"no gate verdict yet for rollout {rollout}{where}", highlight=False)
        raise typer.Exit(1)
    if as_json:
        return
    for v in records:
        how = (
            "hard rule, before the soak ended" if v.kind == "hard_rule" else "judge, after the soak"
        )
        console.rule(f"rollout {escape(v.rollout_id)} wave {v.wave}: {v.decision.verdict} ({how})")
        console.print(
            f"window {v.window_start.isoformat()} .. {v.window_end.isoformat()}  "
            f"policy sha256:{v.policy_digest[:16]}  event {v.event_id}",
            highlight=False,
            markup=False,
        )
        _show(v.decision)
