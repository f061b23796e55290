"""``lockstep fleet ...``: the fleet registry (inventory service)."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

fleet_app = typer.Typer(help="The fleet registry: import nodes, list them.", no_args_is_help=True)
console = Console()
errors = Console(stderr=True, soft_wrap=True)


def _read(source: str) -> str:
    if source.startswith(("http://", "https://")):
        with urllib.request.urlopen(source, timeout=30) as resp:  # noqa: S310 - an operator's URL
            return str(resp.read().decode())
    return Path(source).read_text()


@fleet_app.command("import")
def fleet_import(
    source: Annotated[
        str, typer.Argument(help="Fleet file (YAML/JSON) or a simulator's /fleet.json URL.")
    ],
    credentials: Annotated[
        str | None,
        typer.Option(
            help="Credential reference for nodes that name none (env:PREFIX or file:/path)."
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """Validate the whole file, then add or update every node in one transaction.

    Uses LOCKSTEP_DATABASE_URL (and LOCKSTEP_INVENTORY_DB_SCHEMA). Nothing is written when any
    node is invalid; secrets are refused (reference them with env: or file:).
    """
    from lockstep_inventory.admin import import_fleet
    from lockstep_inventory.domain.fleet_file import FleetFileError, parse_fleet
    from lockstep_inventory.settings import Settings

    try:
        nodes = parse_fleet(_read(source), default_credentials=credentials)
    except (OSError, FleetFileError) as exc:
        errors.print(f"[red]error:[/] {source}: {exc}", highlight=False)
        raise typer.Exit(2) from None
    result = asyncio.run(import_fleet(Settings(), nodes))
    summary = {
        "nodes": len(nodes),
        "added": result.added,
        "updated": result.updated,
        "unchanged": result.unchanged,
    }
    if as_json:
        print(json.dumps(summary))
    else:
        console.print(
            f"imported {len(nodes)} node(s): {result.added} added, {result.updated} "
            f"updated, {result.unchanged} unchanged"
        )


@fleet_app.command("list")
def fleet_list(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """Every registered node (credential references only, never secrets)."""
    from lockstep_inventory.admin import fleet
    from lockstep_inventory.settings import Settings

    nodes = asyncio.run(fleet(Settings()))
    if as_json:
        print(json.dumps([n.model_dump() for n in nodes]))
        return
    for n in nodes:
        console.print(f"{n.id}  {n.profile:10} {n.site:8} {n.pool:12} {n.bmc_url}")
