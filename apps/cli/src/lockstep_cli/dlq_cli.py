"""``lockstep dlq list|show|replay|purge``: what each service gave up on, for operators.

Every service keeps its dead letters in its own schema's ``dead_letters`` table (the reason,
the delivery count and the original bytes; ``lockstep_common.deadletter``). These commands
read that table directly and never migrate anything; ``replay`` publishes the stored bytes
again on the original subject (a new ``Nats-Msg-Id``, so JetStream does not drop it as a
duplicate) and removes the row: if it fails again it is dead-lettered again, with a new row.
Exit codes: 0 done, 1 nothing matched, 2 bad input or an unreachable server.
"""

from __future__ import annotations

import base64
import importlib
import json
import uuid
from typing import Annotated, Any

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

dlq_app = typer.Typer(help="Dead letters: list, show, replay or purge them.", no_args_is_help=True)
console = stdout_console()
ServiceArg = Annotated[str, typer.Argument(help=f"One of {', '.join(SERVICES)}.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]
COLUMNS = "id, failed_at, consumer, stream, stream_seq, subject, error_kind, deliveries, reason"


@dlq_app.callback()
def dlq_stack(data_dir: StackDirOption = None, verbose: VerboseOption = False) -> None:
    """Talks to LOCKSTEP_NATS_URL / LOCKSTEP_DATABASE_URL, or else to the `lockstep up`
    running under --data-dir (LOCKSTEP_DATA_DIR, default .data): as its cli identity, and as
    admin to replay."""
    choose_stack(data_dir, verbose)


def _settings(service: str, identity: str = CLI) -> Any:
    if service not in SERVICES:
        fail(f"unknown service {service!r}; choose from {', '.join(SERVICES)}")
    settings_class = importlib.import_module(f"lockstep_{service}.settings").Settings
    return settings_of(settings_class, identity)


async def _fetch(service: str, settings: Any, sql: str, *args: Any) -> list[dict[str, Any]]:
    from lockstep_common import db

    conn = await db.connect_with_retry(settings.database_url, attempts=3)
    try:
        name = settings.db_schema or service  # as ServiceApp names it
        await db.act_as_owner(conn, name)
        schema = db.quote_ident(name)
        rows = await conn.fetch(sql.replace("{table}", f"{schema}.dead_letters"), *args)
    finally:
        await conn.close()
    return [dict(r) for r in rows]


def _jsonable(row: dict[str, Any]) -> dict[str, Any]:
    out = {k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in row.items()}
    payload = out.pop("payload", None)
    if payload is not None:
        try:
            out["payload"] = bytes(payload).decode("utf-8")
        except UnicodeDecodeError:
            out["payload_base64"] = base64.b64encode(bytes(payload)).decode()
    return out


@dlq_app.command("list")
def dlq_list(
    service: ServiceArg,
    limit: Annotated[int, typer.Option(min=1, help="Newest first, at most this many.")] = 50,
    as_json: JsonOpt = False,
) -> None:
    """The newest dead letters of one service, with why each was given up on."""
    settings = _settings(service)
    rows = run(
        _fetch(
            service, settings, f"SELECT {COLUMNS} FROM {{table}} ORDER BY id DESC LIMIT $1", limit
        )
    )
    if as_json:
        console.print_json(json.dumps([_jsonable(r) for r in rows]))
        return
    table = Table(title=f"{service}: {len(rows)} dead letter(s), newest first")
    for column in ("id", "failed at", "subject", "kind", "deliveries", "reason"):
        table.add_column(column, overflow="fold")
    for r in rows:
        table.add_row(
            str(r["id"]),
            r["failed_at"].isoformat(timespec="seconds"),
            r["subject"],
            r["error_kind"],
            str(r["deliveries"]),
            r["reason"][:200],
        )
    console.print(table)


@dlq_app.command("show")
def dlq_show(service: ServiceArg, letter: Annotated[int, typer.Argument(help="Its id.")]) -> None:
    """One dead letter in full, with the original message (text, or base64 when binary)."""
    settings = _settings(service)
    rows = run(
        _fetch(service, settings, f"SELECT {COLUMNS}, payload FROM {{table}} WHERE id = $1", letter)
    )
    if not rows:
        fail(f"{service} has no dead letter {letter}", 1)
    console.print_json(json.dumps(_jsonable(rows[0])))


@dlq_app.command("replay")
def dlq_replay(service: ServiceArg, letter: Annotated[int, typer.Argument(help="Its id.")]) -> None:
    """Publish the original message again on its subject, then forget the dead letter."""
    settings = _settings(service, ADMIN)
    rows = run(
        _fetch(service, settings, "SELECT subject, payload FROM {table} WHERE id = $1", letter)
    )
    if not rows or rows[0]["payload"] is None:
        fail(f"{service} has no dead letter {letter} with its original message", 1)
    subject, payload = rows[0]["subject"], bytes(rows[0]["payload"])
    if not consumes(service, subject):
        # The row is the service's own: a compromised service could write any subject there
        # and have the administrator publish it. Replay only what it could have been sent.
        fail(
            f"dead letter {letter} names subject {subject!r}, which {service} does not consume: "
            "not replayed",
            1,
        )
    stream_seq = run(_publish(settings, subject, payload))
    run(_fetch(service, settings, "DELETE FROM {table} WHERE id = $1 RETURNING id", letter))
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
    settings = _settings(service)
    if letters is not None:
        rows = run(
            _fetch(
                service, settings, "DELETE FROM {table} WHERE id = ANY($1) RETURNING id", letters
            )
        )
    else:
        assert older_than_days is not None  # noqa: S101 - the check above
        rows = run(
            _fetch(
                service,
                settings,
                "DELETE FROM {table} WHERE failed_at < now() - make_interval(secs => $1)"
                " RETURNING id",
                older_than_days * 86_400,
            )
        )
    console.print(f"purged {len(rows)} dead letter(s) of {service}")
    if not rows:
        raise typer.Exit(1)
