"""``lockstep demo``: the command; what it runs is demo.py (imported when it runs)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from lockstep_cli.cli_io import stdout_console
from lockstep_cli.stack_start import start_refusals_are_one_line, usable_data_dir


def demo(
    data_dir: Annotated[
        Path | None, typer.Option(help="Keep state here (default: a new temporary directory).")
    ] = None,
) -> None:
    """Run the whole system on embedded NATS and PostgreSQL: an event's journey, drift found on a
    simulated fleet, then a canaried rollout and a bad image halted at the canary."""
    from lockstep_bench.demo import run_demo
    from lockstep_cli.supervisor import Interrupted, stop_signals_unwind

    console = stdout_console()
    if data_dir is not None:
        usable_data_dir(data_dir)
    with stop_signals_unwind(), start_refusals_are_one_line():
        try:
            run_demo(console, data_dir)
        except (KeyboardInterrupt, Interrupted):
            # running_system stopped the services, NATS and PostgreSQL on the way out.
            console.print("demo interrupted: every process stopped.")
            raise typer.Exit(130) from None
