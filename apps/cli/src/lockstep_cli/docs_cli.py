"""``lockstep docs ...``: documentation generated from the event models and the routers."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from lockstep_cli.cli_io import stdout_console

docs_app = typer.Typer(
    help="Generated documentation (JSON Schemas, AsyncAPI, event table).", no_args_is_help=True
)
console = stdout_console()


@docs_app.command("generate")
def docs_generate(
    out: Annotated[Path, typer.Option(help="Docs directory.")] = Path("docs"),
) -> None:
    """Regenerate docs/ from the event models and the services' routers."""
    from lockstep_cli.catalog import parties
    from lockstep_common import schemadocs

    changed = schemadocs.write(out, parties())
    console.print(f"{len(changed)} file(s) changed" + "".join(f"\n  {c}" for c in changed))


@docs_app.command("check")
def docs_check(out: Annotated[Path, typer.Option(help="Docs directory.")] = Path("docs")) -> None:
    """Exit 1 when docs/ is not what the models and the services' routers generate."""
    from lockstep_cli.catalog import parties
    from lockstep_common import schemadocs

    stale = schemadocs.stale(out, parties())
    if stale:
        console.print(
            "[red]stale (run `lockstep docs generate`):[/]" + "".join(f"\n  {s}" for s in stale)
        )
        raise typer.Exit(1)
    console.print("docs are up to date")
