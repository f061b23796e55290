"""``lockstep fabric list|show|pin``: fabric domains the OCI way (seed 002; issue 10,
deliverable 6).

``list`` and ``show`` ask the planner over the bus (``fabric.list``, ``fabric.show``), as
``lockstep rollout status`` does: no database. ``pin`` writes one ``pin`` command to the planner's
``commands`` table and waits for the planner's worker to carry it out, so the planner stays the
only writer of a domain's state and refuses a pin while the domain is PROVISIONING (OCI's 409)
under the same row lock its rollouts take. Bad input (a malformed bundle reference, an unknown
domain or bundle) is one line and exit 2; a refused pin is one line and exit 1.
"""

from __future__ import annotations

import asyncio
import getpass
import json
import re
import time
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from lockstep_cli.cli_io import fail, run, stdout_console

if TYPE_CHECKING:
    import asyncpg

    from lockstep_planner.settings import Settings

fabric_app = typer.Typer(
    help="Fabric domains: current and target bundle, update state, lifecycle; pin a target.",
    no_args_is_help=True,
)
console = stdout_console()
Json = Annotated[bool, typer.Option("--json", help="Print JSON only.")]
DomainArg = Annotated[str, typer.Argument(help="Fabric domain (NVLink domain) id.")]
BUNDLE_REF = re.compile(
    r"^(?P<id>[A-Za-z0-9][A-Za-z0-9._:/-]{0,127})(@(?P<version>[^\s@]{1,64}))?$"
)
"""``ID[@VERSION]``: what ``lockstep rollout plan --bundle`` takes too."""


def _settings() -> Settings:
    from lockstep_cli.rollout_cli import _settings as planner_settings

    return planner_settings()


async def _db(settings: Settings) -> asyncpg.Connection:
    """A connection on the planner's schema, as ``lockstep rollout`` opens it (``pin``)."""
    from lockstep_cli.rollout_cli import _db as planner_db

    return await planner_db(settings)


def _domains(settings: Settings, domain: str | None) -> list[dict[str, Any]]:
    """Every domain (``fabric.list``), or the one named with its history (``fabric.show``),
    as ``--json`` prints them; asked of the planner over the bus."""
    from lockstep_cli.ops_client import ask
    from lockstep_common.events.v1 import (
        FabricListAnswered,
        FabricListRequested,
        FabricShowAnswered,
        FabricShowRequested,
    )

    if domain is None:
        listed = ask(settings, "planner", "fabric.list", FabricListRequested(), FabricListAnswered)
        return [d.model_dump(mode="json") for d in listed.domains]
    if not 0 < len(domain) <= 128:
        fail(escape(f"no fabric domain {domain}"))
    shown = ask(
        settings, "planner", "fabric.show", FabricShowRequested(domain=domain), FabricShowAnswered
    )
    history = [a.model_dump(mode="json") for a in shown.history]
    return [{**shown.domain.model_dump(mode="json"), "history": history}]


def _label(value: str | None) -> str:
    if value is None:
        return "-"
    return value if "@" in value else value[:12]


@fabric_app.command("list")
def fabric_list(as_json: Json = False) -> None:
    """Every fabric domain: current and target bundle, lifecycle, update state and reason."""
    docs = _domains(_settings(), None)
    if as_json:
        print(json.dumps({"domains": docs}))
        return
    if not docs:
        console.print("no fabric domains known yet (the planner learns them from the fleet)")
        return
    table = Table()
    for column in ("domain", "nodes", "lifecycle", "current", "target", "update", "reason"):
        table.add_column(column, overflow="fold")
    for d in docs:
        table.add_row(
            d["domain"],
            str(len(d["nodes"])),
            d["lifecycle"],
            _label(d["current"]),
            _label(d["target"]),
            d["update_state"],
            d["update_reason"],
        )
    console.print(table)


@fabric_app.command("show")
def fabric_show(domain: DomainArg, as_json: Json = False) -> None:
    """One fabric domain: its state, its nodes, who changed it, and its recent audit lines."""
    docs = _domains(_settings(), domain)
    if not docs:
        fail(escape(f"no fabric domain {domain}"))
    doc = docs[0]
    if as_json:
        print(json.dumps(doc))
        return
    console.print(f"fabric domain [bold]{doc['domain']}[/] {doc['lifecycle']}")
    for key in ("current", "target"):
        console.print(f"  {key}: {doc[key] or '-'}", highlight=False)
    console.print(f"  update: {doc['update_state']} ({doc['update_reason']})", highlight=False)
    console.print(f"  recycle level: {doc['recycle_level']}")
    if doc["rollout_id"]:
        console.print(f"  held by rollout {doc['rollout_id']}")
    console.print(f"  nodes ({len(doc['nodes'])}): {', '.join(doc['nodes'])}", highlight=False)
    console.print(f"  changed by {doc['changed_by']} at {doc['changed_at']}")
    for line in doc["history"]:
        console.print(
            f"  {line['at']} {line['actor']}: {line['action']}: {line['detail']}",
            highlight=False,
        )


class PinRefused(Exception):
    """A pin that is not written or was refused: the exit code and the one line to print."""

    def __init__(self, code: int, line: str) -> None:
        super().__init__(line)
        self.code, self.line = code, line


async def _target_of(conn: asyncpg.Connection, domain: str, bundle: str) -> str:
    """The stack hash to pin ``domain`` to, after every check the CLI can make at once (the
    planner checks the conflict again under its lock).

    Raises:
        PinRefused: malformed reference or unknown domain or bundle (2), a conflict (1).
    """
    from lockstep_planner.domain.fabric import FabricConflict, FabricDomain, Lifecycle, pin

    ref = BUNDLE_REF.match(bundle)
    if ref is None:
        raise PinRefused(2, f"--bundle {bundle!r}: not a bundle reference (ID[@VERSION])")
    row = await conn.fetchrow(
        "SELECT lifecycle, current_hash, target_hash, rollout_id FROM fabric_domains"
        " WHERE domain = $1",
        domain,
    )
    if row is None:
        raise PinRefused(2, f"no fabric domain {domain}")
    stack_hash: str | None = await conn.fetchval(
        "SELECT stack_hash FROM bundles WHERE bundle_id = $1"
        " AND ($2::text IS NULL OR bundle_version = $2) ORDER BY attested_at DESC LIMIT 1",
        ref["id"],
        ref["version"],
    )
    if stack_hash is None:
        raise PinRefused(2, f"--bundle: no attested bundle {bundle}")
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
        raise PinRefused(1, str(exc).replace(stack_hash, bundle)) from None
    return stack_hash


async def pin_domain(
    settings: Settings, domain: str, bundle: str, by: str, wait_s: float
) -> tuple[int, str]:
    """Check the input, write the ``pin`` command, wait for the planner's outcome: (exit code,
    the one line to print)."""
    conn = await _db(settings)
    try:
        try:
            stack_hash = await _target_of(conn, domain, bundle)
        except PinRefused as exc:
            return exc.code, exc.line
        command_id = await conn.fetchval(
            "INSERT INTO commands (rollout_id, action, requested_by, bundle)"
            " VALUES ($1, 'pin', $2, $3) RETURNING id",
            f"fabric:{domain}",
            by,
            stack_hash,
        )
        deadline = time.monotonic() + wait_s
        outcome = None
        while outcome is None and time.monotonic() <= deadline:
            outcome = await conn.fetchval(
                "SELECT outcome FROM commands WHERE id = $1 AND done_at IS NOT NULL", command_id
            )
            if outcome is None:
                await asyncio.sleep(0.2)
    finally:
        await conn.close()
    if outcome is None:
        return 1, f"{domain}: pin queued, but the planner has not carried it out yet"
    text = str(outcome).replace(stack_hash, bundle)
    if text.startswith("done"):
        already = "already " if text != "done" else ""
        return 0, f"{domain}: {already}pinned to {bundle}"
    return 1, text.removeprefix("refused: ")


@fabric_app.command("pin")
def fabric_pin(
    domain: DomainArg,
    bundle: Annotated[str, typer.Option("--bundle", help="Attested bundle: ID[@VERSION].")],
    by: Annotated[
        str | None, typer.Option("--by", help="Who asks (default: the login name).")
    ] = None,
    wait: Annotated[float, typer.Option("--wait", help="Seconds to wait for the planner.")] = 30.0,
) -> None:
    """Set the domain's target bundle. The update itself waits until no job occupies the domain
    and is carried out by a rollout of that bundle; refused while the domain is PROVISIONING."""
    code, line = run(pin_domain(_settings(), domain, bundle, by or getpass.getuser(), wait))
    if code:
        fail(escape(line), code)
    console.print(line, highlight=False)
