"""``lockstep node ...``: what Lockstep did to one node (the updater's step records), asked of
the updater over the bus (``lockstep_updater.operator_commands``): no database."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer
from rich.table import Table
from rich.text import Text

from lockstep_cli.cli_io import fail, settings_of, stdout_console

if TYPE_CHECKING:
    from lockstep_common.envelope import EventData

node_app = typer.Typer(help="One node: what Lockstep did to it.", no_args_is_help=True)
console = stdout_console()
MAX_REASON = 500
UPDATER = "updater"
A = TypeVar("A", bound="EventData")
T = TypeVar("T")


def _ask(command: str, request: EventData, answer: type[A]) -> A:
    from lockstep_cli.ops_client import ask
    from lockstep_common.operator_settings import OperatorSettings

    return ask(settings_of(OperatorSettings), UPDATER, command, request, answer)


def _valid(make: Callable[[], T]) -> T:
    """A request from the command line; bad input is one line naming it (exit 2)."""
    from pydantic import ValidationError

    try:
        return make()
    except ValidationError as exc:
        err = exc.errors()[0]
        fail(f"{'.'.join(str(p) for p in err['loc']) or '(input)'}: {err['msg']}")


def _node(node_id: str) -> str:
    from lockstep_common.subjects import token

    try:
        return token(node_id, "node id")
    except ValueError as exc:
        fail(str(exc))


@node_app.command("history")
def node_history(
    node_id: Annotated[str, typer.Argument(help="Node id, e.g. node-00042.")],
    limit: Annotated[int, typer.Option(min=1, max=1000, help="Most recent steps shown.")] = 200,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """Every update step of the node, oldest first: rollout, wave, step, attempt, fencing
    token, start, end, outcome and reason (read-only; the updater answers)."""
    from lockstep_common.events.v1 import NodeHistoryAnswered, NodeHistoryRequested

    request = _valid(lambda: NodeHistoryRequested(node_id=_node(node_id), limit=limit))
    steps = _ask("node.history", request, NodeHistoryAnswered).steps
    if as_json:
        print(json.dumps([s.model_dump(mode="json") for s in steps]))
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


@node_app.command("quarantined")
def node_quarantined(
    after: Annotated[
        str | None, typer.Option(help="Start after this node id (the last page's last).")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=500, help="Nodes in the page.")] = 100,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """The quarantined nodes, in node id order: those `lockstep node release` would give back,
    with the rollout and wave that quarantined them, since when and why (read-only; the
    updater answers)."""
    from lockstep_common.events.v1 import NodeQuarantinedAnswered, NodeQuarantinedRequested

    start = None if after is None else _node(after)
    request = _valid(lambda: NodeQuarantinedRequested(after=start, limit=limit))
    answer = _ask("node.quarantined", request, NodeQuarantinedAnswered)
    if as_json:
        print(json.dumps(answer.model_dump(mode="json")))
        return
    if not answer.nodes:
        console.print("no node is quarantined" + (f" after {after}" if after else ""))
        return
    table = Table(title="quarantined nodes")
    for column in ("node", "rollout", "wave", "since", "reason"):
        table.add_column(column, overflow="fold")
    for q in answer.nodes:
        table.add_row(  # Text: the updater's strings are shown, never read as markup
            Text(q.node_id), Text(q.rollout_id), str(q.wave),
            q.since.isoformat(timespec="seconds"), Text(q.reason),
        )  # fmt: skip
    console.print(table)
    if answer.next_after:
        console.print(f"more: lockstep node quarantined --after {answer.next_after}")


@node_app.command("approve-remedy")
def node_approve_remedy(
    node_id: Annotated[str, typer.Argument(help="Node id, e.g. node-00042.")],
) -> None:
    """Let the GSP / driver runbook (seed 004) run on a node whose remedy waits for approval
    (LOCKSTEP_UPDATER_GSP_REMEDY=approval): the updater drains it, reinstalls the pinned driver
    branch as one unit, rebuilds DKMS, reboots, verifies and gives it back."""
    from lockstep_common.events.v1 import NodeApproveRemedyAnswered, NodeApproveRemedyRequested

    request = _valid(lambda: NodeApproveRemedyRequested(node_id=_node(node_id)))
    _ask("node.approve-remedy", request, NodeApproveRemedyAnswered)
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
    who released it (the NATS identity, and your login name as you give it) and why
    (`lockstep node history`)."""
    import getpass

    from lockstep_common.events.v1 import NodeReleaseAnswered, NodeReleaseRequested

    node = _node(node_id)
    why = " ".join(reason.split())
    if not why:
        fail("--reason must say why the node may serve again")
    if len(why) > MAX_REASON:
        fail(f"--reason is {len(why)} characters; at most {MAX_REASON}")
    request = _valid(
        lambda: NodeReleaseRequested(node_id=node, reason=why, operator=getpass.getuser()[:64])
    )
    release_id = _ask("node.release", request, NodeReleaseAnswered).release_id
    console.print(f"{node_id}: release {release_id} recorded; the updater gives its drain back")
