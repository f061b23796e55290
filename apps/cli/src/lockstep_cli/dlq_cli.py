"""``lockstep dlq list|show|replay|purge``: what each service gave up on, for operators.

Every service keeps its dead letters in its own schema's ``dead_letters`` table (the reason,
the delivery count and the original bytes; ``lockstep_common.deadletter``) and answers these
commands about them over the bus (``lockstep_common.dlq_commands``): the CLI reads no table.
``replay`` (as ``admin``) reads the letter, publishes the stored bytes again on the original
subject (a new ``Nats-Msg-Id``, so JetStream does not drop it as a duplicate) and purges the
letter: if it fails again it is dead-lettered again, with a new row.
Exit codes: 0 done, 1 nothing matched or the service could not answer, 2 bad input, 3 no
answer (NATS or the service unavailable).
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.table import Table

from lockstep_cli.cli_io import (
    StackDirOption,
    VerboseOption,
    choose_stack,
    fail,
    run,
    settings_of,
    stdout_console,
)
from lockstep_common.identities import ADMIN, CLI
from lockstep_common.identities import SERVICE_NAMES as SERVICES

if TYPE_CHECKING:
    from lockstep_common.envelope import EventData
    from lockstep_common.events.v1 import DlqShowAnswered

A = TypeVar("A", bound="EventData")
T = TypeVar("T")

dlq_app = typer.Typer(help="Dead letters: list, show, replay or purge them.", no_args_is_help=True)
console = stdout_console()
ServiceArg = Annotated[str, typer.Argument(help=f"One of {', '.join(SERVICES)}.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]


@dlq_app.callback()
def dlq_stack(data_dir: StackDirOption = None, verbose: VerboseOption = False) -> None:
    """Asks the service over LOCKSTEP_NATS_URL, or else the `lockstep up` running under
    --data-dir (LOCKSTEP_DATA_DIR, default .data): as its cli identity, and as admin to
    replay."""
    choose_stack(data_dir, verbose)


def _settings(service: str, identity: str = CLI) -> Any:
    if service not in SERVICES:
        fail(f"unknown service {service!r}; choose from {', '.join(SERVICES)}")
    from lockstep_common.operator_settings import OperatorSettings

    return settings_of(OperatorSettings, identity)


def _ask(settings: Any, service: str, command: str, request: Any, answer: type[A]) -> A:
    from lockstep_cli.ops_client import ask

    return ask(settings, service, command, request, answer, not_found_exit=1)


@dlq_app.command("list")
def dlq_list(
    service: ServiceArg,
    limit: Annotated[int, typer.Option(min=1, help="Newest first, at most this many.")] = 50,
    as_json: JsonOpt = False,
) -> None:
    """The newest dead letters of one service, with why each was given up on."""
    from lockstep_common.events.v1 import DlqListAnswered, DlqListRequested

    settings = _settings(service)
    request = _valid(lambda: DlqListRequested(limit=limit))
    letters = _ask(settings, service, "dlq.list", request, DlqListAnswered).letters
    if as_json:
        console.print_json(json.dumps([letter.model_dump(mode="json") for letter in letters]))
        return
    table = Table(title=f"{service}: {len(letters)} dead letter(s), newest first")
    for column in ("id", "failed at", "subject", "kind", "deliveries", "reason"):
        table.add_column(column, overflow="fold")
    for r in letters:
        table.add_row(
            str(r.id),
            r.failed_at.isoformat(timespec="seconds"),
            r.subject,
            r.error_kind,
            str(r.deliveries),
            r.reason[:200],
        )
    console.print(table)


def _show(settings: Any, service: str, letter: int) -> DlqShowAnswered:
    from lockstep_common.events.v1 import DlqShowAnswered, DlqShowRequested

    request = _valid(lambda: DlqShowRequested(id=letter))
    return _ask(settings, service, "dlq.show", request, DlqShowAnswered)


def _valid(make: Callable[[], T]) -> T:
    """A request from the command line; bad input is one line naming it (exit 2)."""
    from pydantic import ValidationError

    try:
        return make()
    except ValidationError as exc:
        err = exc.errors()[0]
        fail(f"{'.'.join(str(p) for p in err['loc']) or '(input)'}: {err['msg']}")


@dlq_app.command("show")
def dlq_show(service: ServiceArg, letter: Annotated[int, typer.Argument(help="Its id.")]) -> None:
    """One dead letter in full, with the original message (text, or base64 when binary)."""
    shown = _show(_settings(service), service, letter)
    doc = shown.letter.model_dump(mode="json")
    if shown.payload is not None:
        doc["payload"] = shown.payload
    if shown.payload_base64 is not None:
        doc["payload_base64"] = shown.payload_base64
    console.print_json(json.dumps(doc))


@dlq_app.command("replay")
def dlq_replay(service: ServiceArg, letter: Annotated[int, typer.Argument(help="Its id.")]) -> None:
    """Publish the original message again on its subject, then forget the dead letter."""
    from lockstep_common.events.v1 import DlqPurgeAnswered, DlqPurgeRequested

    settings = _settings(service, ADMIN)
    shown = _show(settings, service, letter)
    if shown.payload is not None:
        payload = shown.payload.encode()
    elif shown.payload_base64 is not None:
        payload = base64.b64decode(shown.payload_base64)
    else:
        fail(f"{service} has no dead letter {letter} with its original message", 1)
    subject = shown.letter.subject
    if not consumes(service, subject):
        # The row is the service's own: a compromised service could write any subject there
        # and have the administrator publish it. Replay only what it could have been sent.
        fail(
            f"dead letter {letter} names subject {subject!r}, which {service} does not consume: "
            "not replayed",
            1,
        )
    stream_seq = run(_publish(settings, subject, payload))
    _ask(settings, service, "dlq.purge", DlqPurgeRequested(ids=(letter,)), DlqPurgeAnswered)
    console.print(f"replayed dead letter {letter} on {subject} (stream sequence {stream_seq})")


def consumes(service: str, subject: str) -> bool:
    """Whether ``subject`` (logical) is one ``service``'s subscriptions take."""
    from lockstep_cli.catalog import subscriptions_by_service
    from lockstep_common.topology import subject_matches

    return any(
        subject_matches(pattern, subject)
        for sub in subscriptions_by_service()[service]
        for pattern in sub.subjects
    )


async def _publish(settings: Any, subject: str, payload: bytes) -> int:
    from lockstep_common.envelope import MSG_ID_HEADER
    from lockstep_common.natsconn import connect
    from lockstep_common.subjects import Namespace

    # Republishing on an event's own subject is the administrator's right (bus_access: admin).
    nc = await connect(
        settings.nats_access(),
        name="lockstep-dlq-replay",
        connect_timeout=5,
        max_reconnect_attempts=1,
    )
    try:
        wire = Namespace(settings.namespace).wire(subject)
        ack = await nc.jetstream().publish(
            wire, payload, headers={MSG_ID_HEADER: f"replay-{uuid.uuid4()}"}
        )
        return int(ack.seq)
    finally:
        await nc.close()


@dlq_app.command("purge")
def dlq_purge(
    service: ServiceArg,
    letters: Annotated[list[int] | None, typer.Option("--id", help="These ids.")] = None,
    older_than_days: Annotated[
        float | None, typer.Option(min=0, help="Everything recorded longer ago than this.")
    ] = None,
) -> None:
    """Forget dead letters: by id, or by age (one of the two is required)."""
    if (letters is None) == (older_than_days is None):
        fail("give --id (repeatable) or --older-than-days, not both and not neither")
    from lockstep_common.events.v1 import DlqPurgeAnswered, DlqPurgeRequested

    settings = _settings(service)
    request = _valid(
        lambda: DlqPurgeRequested(
            ids=tuple(letters or ()),
            older_than_s=None if older_than_days is None else older_than_days * 86_400,
        )
    )
    rows = _ask(settings, service, "dlq.purge", request, DlqPurgeAnswered).purged
    console.print(f"purged {len(rows)} dead letter(s) of {service}")
    if not rows:
        raise typer.Exit(1)
