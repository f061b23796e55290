"""``lockstep gate evaluate``: the healthgate's judge on a recorded sample file, for SREs and tests;
``lockstep gate show``: why a live gate decided what it did (the persisted verdicts, asked of the
healthgate over the bus).
``lockstep bench gate`` (lockstep_bench.cli) measures how fast and how good that judge is.

``evaluate`` runs exactly the judge the service runs (``lockstep_gate.judge``), as of
the last sample's time unless ``--at`` says otherwise, so a verdict can be re-derived from the
samples that produced it. Exit codes: 0 passed, 1 tripped, 3 inconclusive, 2 bad input.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from lockstep_cli.cli_io import fail, settings_of, stdout_console

if TYPE_CHECKING:
    from collections.abc import Sequence

    from lockstep_common.events.v1 import GateShowAnswered
    from lockstep_gate.decision import GateDecision, MetricJudgement

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
    if decision.metrics:
        _metrics(decision.metrics, "metrics: canary vs control, one value per node (* critical)")
    _tail(decision)
    trip = decision.at_trip
    if trip is not None:
        since = datetime.fromtimestamp(trip.window_start, UTC).isoformat()
        until = datetime.fromtimestamp(trip.window_end, UTC).isoformat()
        console.print(
            f"{trip.label}; window {since} .. {until}",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )
        _metrics(trip.metrics, "metrics at the trip (evidence only; * critical)")


def _metrics(judged: Sequence[MetricJudgement], title: str) -> None:
    metrics = Table(title=title)
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
    for j in judged:
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
    for j in judged:
        if j.outcome in ("environmental", "no_data", "worse"):
            console.print(
                f"{j.metric} [{j.stratum}] {j.outcome}: {j.detail}",
                highlight=False,
                markup=False,
                soft_wrap=True,
            )


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
    from lockstep_gate.judge import evaluate
    from lockstep_gate.policy import PolicyError
    from lockstep_gate.policy_files import default_policy, load_policy
    from lockstep_gate.sample_files import SampleFileError, read_samples

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


def _verdicts(rollout: str, wave: int | None) -> GateShowAnswered:
    """The healthgate's persisted verdicts, asked of the healthgate over the bus."""
    from lockstep_cli.ops_client import ask
    from lockstep_common.events.v1 import GateShowAnswered, GateShowRequested
    from lockstep_common.operator_settings import OperatorSettings

    request = GateShowRequested(rollout_id=rollout, wave=wave)
    return ask(settings_of(OperatorSettings), "healthgate", "gate.show", request, GateShowAnswered)


@gate_app.command("show")
def gate_show(
    rollout: Annotated[str, typer.Argument(help="Rollout id.")],
    wave: Annotated[int | None, typer.Option("--wave", min=0, help="Only this wave.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the verdicts as JSON.")] = False,
) -> None:
    """Why a live gate decided what it did: each wave's verdict, how it was reached (a hard rule
    at once, or the judge after the soak), the window judged and the per-metric evidence.

    Exit 0 shown, 1 no verdict yet, 2 bad input, 3 no answer from the healthgate.
    """
    from lockstep_common.subjects import token

    try:
        token(rollout, "rollout id")
    except ValueError as exc:
        fail(escape(str(exc)))
    from lockstep_gate.decision import GateDecision

    records = _verdicts(rollout, wave).verdicts
    if as_json:
        print(json.dumps([v.model_dump(mode="json") for v in records]))
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
        console.rule(f"rollout {escape(v.rollout_id)} wave {v.wave}: {v.verdict} ({how})")
        console.print(
            f"window {v.window_start.isoformat()} .. {v.window_end.isoformat()}  "
            f"policy sha256:{v.policy_digest[:16]}  event {v.event_id}",
            highlight=False,
            markup=False,
        )
        _show(GateDecision.model_validate(v.decision))
