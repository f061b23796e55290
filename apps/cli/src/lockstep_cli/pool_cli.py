"""``lockstep pool set|show``: maintenance windows per pool and per site (issue 27, item 4).

``set`` checks what is typed (``lockstep_common.maintenance``: days, times, the time zone, no
window that never opens, no two that overlap) before anything is sent, then publishes
``maintenance.requested`` as the ``cli`` identity: the planner is the only writer of windows,
records the change with who asked in its audit trail (``pool:NAME`` / ``site:NAME``) and
announces it to the updater. ``set`` then waits for that
audit line (``--wait``). ``show`` reads what the planner holds, read-only (``windows_view``,
the one read, as ``fabric show`` reads); with a name, the last audit lines too.
Exit codes: 0 done, 1 not recorded in time or not found, 2 bad input or an unreachable server.
"""

from __future__ import annotations

import getpass
import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from lockstep_cli.cli_io import fail, run, settings_of, stdout_console

if TYPE_CHECKING:
    from lockstep_common.events.v1 import MaintenanceWindowsRequested, PoolWindows
    from lockstep_common.operator_settings import OperatorSettings as Settings

pool_app = typer.Typer(
    help="Maintenance windows per pool and per site: set them, show them.",
    no_args_is_help=True,
)
console = stdout_console()
Json = Annotated[bool, typer.Option("--json", help="Print JSON only.")]
NameArg = Annotated[str, typer.Argument(help="The pool (or with --site, the site).")]
Site = Annotated[
    bool, typer.Option("--site", help="NAME is a site: its windows bind every pool there.")
]
AUDIT_SHOWN = 20


def _settings() -> Settings:
    """Where the planner is asked, from LOCKSTEP_* (a bad variable: exit 2 naming it)."""
    from lockstep_common.operator_settings import OperatorSettings

    return settings_of(OperatorSettings)


async def windows_view(settings: Settings, key: tuple[str, str] | None) -> list[dict[str, Any]]:
    """What the planner holds: every pool's and site's windows, or one's with its recent audit
    lines (``key`` = (scope, name)); [] when ``key`` has neither windows nor history. Asked of
    the planner over the bus (``pool.show``): no database."""
    import asyncio

    from lockstep_cli.ops_client import ask
    from lockstep_common.events.v1 import PoolShowAnswered, PoolShowRequested

    scope, name = key if key is not None else (None, None)
    request = PoolShowRequested.model_validate({"scope": scope, "name": name})
    answer = await asyncio.to_thread(
        ask, settings, "planner", "pool.show", request, PoolShowAnswered
    )
    docs = [_doc(w) for w in answer.windows]
    if key is None:
        return docs
    if not docs and not answer.history:
        return []
    doc = docs[0] if docs else {"scope": key[0], "name": key[1], "windows": None}
    history = [{**a.model_dump(), "at": a.at.isoformat()} for a in answer.history]
    return [{**doc, "history": history}]


def _doc(held: PoolWindows) -> dict[str, Any]:
    from lockstep_common.maintenance import parse_schedule

    schedule = parse_schedule(held.windows, held.timezone)
    now = datetime.now(UTC)
    opens = schedule.next_open(now)
    return {
        "scope": held.scope,
        "name": held.name,
        "timezone": held.timezone,
        "windows": list(held.windows),
        "open_now": schedule.open_at(now),
        "next_opens": opens.isoformat() if opens else None,
        "set_by": held.set_by,
        "set_at": held.set_at.isoformat(),
    }


def _request(
    scope: str, name: str, windows: list[str], timezone: str, always: bool, by: str
) -> MaintenanceWindowsRequested:
    """The request, or exit 2 with one line saying what is wrong (nothing is sent)."""
    from pydantic import ValidationError

    from lockstep_common.events.v1 import MaintenanceWindowsRequested
    from lockstep_common.maintenance import MaintenanceError, parse_schedule

    if always == bool(windows):
        fail("give --window (one or more) or --always (no restriction), not both or neither")
    try:
        if windows:
            parse_schedule(windows, timezone)  # the one-line reason, before the model's
        return MaintenanceWindowsRequested(
            scope=scope,  # type: ignore[arg-type]
            name=name,
            timezone=timezone,
            windows=None if always else tuple(windows),
            requested_by=by,
        )
    except MaintenanceError as exc:
        fail(escape(str(exc)))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "request"
        fail(escape(f"{where}: {first['msg']}"))


async def _publish(settings: Settings, data: MaintenanceWindowsRequested, timeout_s: float) -> str:
    """Publish the request and wait for JetStream's acknowledgement; its event id."""
    from lockstep_cli.publish import publish_as_cli
    from lockstep_common import subjects

    return await publish_as_cli(
        settings.nats_access(),
        settings.namespace,
        subjects.maintenance_requested(),
        data,
        timeout_s,
        "request",
    )


async def set_windows(
    settings: Settings, data: MaintenanceWindowsRequested, wait_s: float
) -> tuple[int, str]:
    """Send the request and wait for the planner's audit line naming it: (exit code, line)."""
    from lockstep_cli.polling import until

    event_id = await _publish(settings, data, min(10.0, max(wait_s, 1.0)))
    what = f"{data.scope} {data.name}"

    async def recorded() -> str | None:
        found = await windows_view(settings, (data.scope, data.name))
        for line in found[0]["history"] if found else ():
            if f"request {event_id}" in line["detail"]:
                return f"{what}: {line['action']} by {line['actor']}"
        return None

    try:
        return 0, await until(recorded, what=f"request {event_id}", timeout_s=wait_s, poll_s=0.2)
    except TimeoutError:
        return 1, f"{what}: request {event_id} sent, but the planner has not recorded it yet"


@pool_app.command("set")
def pool_set(
    name: NameArg,
    window: Annotated[
        list[str] | None,
        typer.Option(
            "--window",
            help="A weekly window 'DAYS HH:MM-HH:MM' (e.g. 'sat,sun 22:00-06:00', 'mon-fri "
            "01:00-04:00', 'daily 23:00-01:00'); repeat for more. An end at or before the start "
            "runs into the next day.",
        ),
    ] = None,
    timezone: Annotated[
        str, typer.Option("--timezone", help="IANA time zone of the times (e.g. Europe/Berlin).")
    ] = "UTC",
    always: Annotated[
        bool, typer.Option("--always", help="Remove the windows: work may start at any time.")
    ] = False,
    site: Site = False,
    by: Annotated[
        str | None, typer.Option("--by", help="Who asks (default: the login name).")
    ] = None,
    wait: Annotated[
        float, typer.Option("--wait", min=0, help="Seconds to wait for the planner.")
    ] = 30.0,
) -> None:
    """Set (replace) the maintenance windows of a pool or a site, or remove them (--always).
    Rollouts take nodes out of service only while both their pool's and their site's windows
    are open; the planner records who set them."""
    data = _request(
        "site" if site else "pool", name, window or [], timezone, always, by or getpass.getuser()
    )
    code, line = run(set_windows(_settings(), data, wait))
    if code:
        fail(escape(line), code)
    console.print(line, highlight=False)


@pool_app.command("show")
def pool_show(
    name: Annotated[
        str | None, typer.Argument(help="One pool (or site); all when omitted.")
    ] = None,
    site: Site = False,
    as_json: Json = False,
) -> None:
    """The maintenance windows the planner holds: every pool's and site's, or one's with who
    set them and its recent audit lines."""
    key = None if name is None else ("site" if site else "pool", name)
    docs = run(windows_view(_settings(), key))
    if key is not None and not docs:
        fail(escape(f"no windows were ever set for {key[0]} {key[1]}"), 1)
    if as_json:
        print(json.dumps(docs[0] if key is not None else {"windows": docs}))
        return
    if key is None:
        if not docs:
            console.print("no maintenance windows: work may start at any time everywhere")
            return
        table = Table()
        for column in ("scope", "name", "windows", "time zone", "open now", "set by"):
            table.add_column(column, overflow="fold")
        for d in docs:
            table.add_row(
                d["scope"],
                d["name"],
                "; ".join(d["windows"]),
                d["timezone"],
                "yes" if d["open_now"] else f"no (opens {d['next_opens'] or 'never'})",
                f"{d['set_by']} at {d['set_at']}",
            )
        console.print(table)
        return
    doc = docs[0]
    if doc["windows"] is None:
        console.print(f"{doc['scope']} {doc['name']}: no windows (work may start at any time)")
    else:
        console.print(
            f"{doc['scope']} {doc['name']}: {'; '.join(doc['windows'])} ({doc['timezone']}), "
            + ("open now" if doc["open_now"] else f"closed, opens {doc['next_opens'] or 'never'}")
            + f"; set by {doc['set_by']} at {doc['set_at']}",
            highlight=False,
        )
    for line in doc["history"]:
        console.print(
            f"  {line['at']} {line['actor']}: {line['action']}: {line['detail']}",
            highlight=False,
        )
