"""``lockstep docs ...``: documentation generated from the event models and the routers."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from lockstep_cli.cli_io import stdout_console
from lockstep_common.statediagram import MissingMarkers

docs_app = typer.Typer(
    help="Generated documentation (JSON Schemas, AsyncAPI, event table, state diagrams).",
    no_args_is_help=True,
)
console = stdout_console()


@docs_app.command("generate")
def docs_generate(
    out: Annotated[Path, typer.Option(help="Docs directory.")] = Path("docs"),
) -> None:
    """Regenerate docs/ from the event models, the services' routers and their state tables."""
    from lockstep_cli.catalog import parties
    from lockstep_common import schemadocs

    try:
        changed = schemadocs.write(out, parties())
    except MissingMarkers as exc:
        console.print(f"[red]{exc}[/]")
        raise typer.Exit(1) from None
    console.print(f"{len(changed)} file(s) changed" + "".join(f"\n  {c}" for c in changed))


@docs_app.command("check")
def docs_check(out: Annotated[Path, typer.Option(help="Docs directory.")] = Path("docs")) -> None:
    """Exit 1 when docs/ is not what the models, routers and state tables generate."""
    from lockstep_cli.catalog import parties
    from lockstep_common import schemadocs

    try:
        stale = schemadocs.stale(out, parties())
    except MissingMarkers as exc:
        console.print(f"[red]{exc}[/]")
        raise typer.Exit(1) from None
    if stale:
        console.print(
            "[red]stale (run `lockstep docs generate`):[/]" + "".join(f"\n  {s}" for s in stale)
        )
        raise typer.Exit(1)
    console.print("docs are up to date")
