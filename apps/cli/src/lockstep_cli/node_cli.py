"""``lockstep node ...``: what Lockstep did to one node (the updater's step records)."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from lockstep_cli.cli_io import fail, run, settings_of, stdout_console

node_app = typer.Typer(help="One node: what Lockstep did to it.", no_args_is_help=True)
console = stdout_console()
MAX_REASON = 500


@node_app.command("history")
def node_history(
    node_id: Annotated[str, typer.Argument(help="Node id, e.g. node-00042.")],
    limit: Annotated[int, typer.Option(min=1, max=10_000, help="Most recent steps shown.")] = 200,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """Every update step of the node, oldest first: rollout, wave, step, attempt, fencing
    token, start, end, outcome and reason (read-only; uses LOCKSTEP_DATABASE_URL and
    LOCKSTEP_UPDATER_DB_SCHEMA)."""
    from lockstep_common.subjects import token
    from lockstep_updater.admin import history
    from lockstep_updater.settings import Settings

    try:
        token(node_id, "node id")
    except ValueError as exc:
        fail(str(exc))
    steps = run(history(settings_of(Settings), node_id, limit))
    if as_json:
        print(
            json.dumps(
                [
                    {
                        "rollout_id": s.rollout_id,
                        "wave": s.wave,
                        "step": s.step,
                        "attempt": s.attempt,
                        "token": s.token,
                        "started_at": s.started_at.isoformat(),
                        "ended_at": s.ended_at.isoformat(),
                        "outcome": s.outcome,
                        "reason": s.reason,
                    }
                    for s in steps
                ]
            )
        )
        return
    if not steps:
        console.print(f"no update steps recorded for {node_id}")
        return
    table = Table(title=f"{node_id}: update steps")
    for column in ("rollout", "wave", "step", "attempt", "token", "started", "took s", "outcome",
                   "reason"):  # fmt: skip
        table.add_column(column)
    for s in steps:
        took = (s.ended_at - s.started_at).total_seconds()
        table.add_row(
            s.rollout_id, str(s.wave), s.step, str(s.attempt), str(s.token),
            s.started_at.isoformat(timespec="seconds"), f"{took:.1f}", s.outcome, s.reason,
        )  # fmt: skip
    console.print(table)


@node_app.command("approve-remedy")
def node_approve_remedy(
    node_id: Annotated[str, typer.Argument(help="Node id, e.g. node-00042.")],
) -> None:
    """Let the GSP / driver runbook (seed 004) run on a node whose remedy waits for approval
    (LOCKSTEP_UPDATER_GSP_REMEDY=approval): the updater drains it, reinstalls the pinned driver
    branch as one unit, rebuilds DKMS, reboots, verifies and gives it back."""
    from lockstep_common.subjects import token
    from lockstep_updater.admin import approve_remedy
    from lockstep_updater.settings import Settings

    try:
        token(node_id, "node id")
    except ValueError as exc:
        fail(str(exc))
    if not run(approve_remedy(settings_of(Settings), node_id)):
        fail(f"no GSP remedy waits for approval on {node_id}")
    console.print(f"{node_id}: GSP remedy approved; the updater takes it from here")


@node_app.command("release")
def node_release(
    node_id: Annotated[str, typer.Argument(help="Node id, e.g. node-00042.")],
    reason: Annotated[
        str, typer.Option("--reason", help="Why it may serve again (kept in its history).")
    ],
) -> None:
    """Give a quarantined node back to its scheduler once it has been repaired or checked:
    the updater resumes Lockstep's drain of it (a drain someone else made stays) and records
    who released it and why (`lockstep node history`)."""
    import getpass

    from lockstep_common.subjects import token
    from lockstep_updater.admin import release
    from lockstep_updater.settings import Settings
    from lockstep_updater.store import NotQuarantined

    try:
        token(node_id, "node id")
    except ValueError as exc:
        fail(str(exc))
    why = " ".join(reason.split())
    if not why:
        fail("--reason must say why the node may serve again")
    if len(why) > MAX_REASON:
        fail(f"--reason is {len(why)} characters; at most {MAX_REASON}")
    try:
        release_id = run(
            release(settings_of(Settings), node_id, f"released by {getpass.getuser()}: {why}")
        )
    except NotQuarantined as exc:
        fail(str(exc))
    console.print(f"{node_id}: release {release_id} recorded; the updater gives its drain back")
