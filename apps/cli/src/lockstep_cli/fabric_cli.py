"""``lockstep fabric list|show|pin``: fabric domains the OCI way (seed 002; issue 10,
deliverable 6).

All three ask the planner over the bus (``fabric.list``, ``fabric.show``, ``fabric.pin``): no
database. ``pin`` is checked and queued by the planner and carried out at once by its worker's
own pass, so the planner stays the only writer of a domain's state and refuses a pin while the
domain is PROVISIONING (OCI's 409) under the same row lock its rollouts take. Bad input (a
malformed bundle reference, an unknown domain or bundle) is one line and exit 2; a refused pin
is one line and exit 1.
"""

from __future__ import annotations

import getpass
import json
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from lockstep_cli.cli_io import fail, settings_of, stdout_console

if TYPE_CHECKING:
    from lockstep_common.operator_settings import OperatorSettings as Settings

fabric_app = typer.Typer(
    help="Fabric domains: current and target bundle, update state, lifecycle; pin a target.",
    no_args_is_help=True,
)
console = stdout_console()
Json = Annotated[bool, typer.Option("--json", help="Print JSON only.")]
DomainArg = Annotated[str, typer.Argument(help="Fabric domain (NVLink domain) id.")]


def _settings() -> Settings:
    """Where the planner is asked, from LOCKSTEP_* (a bad variable: exit 2 naming it)."""
    from lockstep_common.operator_settings import OperatorSettings

    return settings_of(OperatorSettings)


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


def pin_domain(settings: Settings, domain: str, bundle: str, by: str, wait_s: float) -> str:
    """Ask the planner to pin ``domain`` to ``bundle`` (``fabric.pin``): it checks the input,
    queues the pin and carries it out at once; its outcome is the reply. Returns the one line
    to print; a refusal is one line and its exit code (``ops_client``)."""
    from lockstep_cli.ops_client import ask
    from lockstep_common.events.v1 import FabricPinAnswered, FabricPinRequested

    try:
        request = FabricPinRequested(domain=domain, bundle=bundle, by=by)
    except ValueError:
        fail(escape(f"--bundle {bundle!r}: not a bundle reference (ID[@VERSION])"))
    answer = ask(
        settings,
        "planner",
        "fabric.pin",
        request,
        FabricPinAnswered,
        timeout_s=max(wait_s, 1.0),
    )
    if answer.outcome == "queued":
        fail(escape(f"{domain}: pin queued, but the planner has not carried it out yet"), 1)
    text = answer.outcome.replace(answer.stack_hash, bundle)
    if not text.startswith("done"):
        fail(escape(text.removeprefix("refused: ")), 1)
    already = "already " if text != "done" else ""
    return f"{domain}: {already}pinned to {bundle}"


@fabric_app.command("pin")
def fabric_pin(
    domain: DomainArg,
    bundle: Annotated[str, typer.Option("--bundle", help="Attested bundle: ID\\[@VERSION].")],
    by: Annotated[
        str | None, typer.Option("--by", help="Who asks (default: the login name).")
    ] = None,
    wait: Annotated[float, typer.Option("--wait", help="Seconds to wait for the planner.")] = 30.0,
) -> None:
    """Set the domain's target bundle. The update itself waits until no job occupies the domain
    and is carried out by a rollout of that bundle; refused while the domain is PROVISIONING."""
    line = pin_domain(_settings(), domain, bundle, by or getpass.getuser(), wait)
    console.print(line, highlight=False)
