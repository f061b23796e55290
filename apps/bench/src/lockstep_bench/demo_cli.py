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
    screenshots: Annotated[
        Path | None,
        typer.Option(
            help="Write the console's pages of the halted rollout (rollout, gate) and the fleet "
            "here as PNGs, by headless Chromium, once the bad image's rollout has halted "
            "(how docs/img/console-*.png are made)."
        ),
    ] = None,
    console_listen: Annotated[
        str,
        typer.Option(
            "--console",
            help="Serve the read-only console here while the demo runs, as `reader` (loopback).",
        ),
    ] = "127.0.0.1:8080",
) -> None:
    """Run the whole system on embedded NATS and PostgreSQL: an event's journey, drift found on a
    simulated fleet, then a canaried rollout and a bad image halted at the canary."""
    from lockstep_cli.cli_io import fail
    from lockstep_cli.console_child import checked
    from lockstep_cli.supervisor import Interrupted, stop_signals_unwind
    from lockstep_console.screenshots import ScreenshotError, browser

    console = stdout_console()
    if data_dir is not None:
        usable_data_dir(data_dir)
    listen = checked(console_listen)
    if screenshots is not None:
        if listen == "off":
            fail("--screenshots needs the console: not with --console off")
        try:
            browser()  # before minutes of demo, not after
        except ScreenshotError as exc:
            fail(f"--screenshots: {exc}")
    from lockstep_bench.demo import run_demo  # the whole system: after the refusals

    with stop_signals_unwind(), start_refusals_are_one_line():
        try:
            run_demo(console, data_dir, screenshots=screenshots, listen=listen)
        except ScreenshotError as exc:
            # Every process was stopped on the way out; the rest of the demo was shown.
            console.print(f"[red]--screenshots: {exc}[/]", highlight=False)
            raise typer.Exit(1) from None
        except (KeyboardInterrupt, Interrupted):
            # running_system stopped the services, NATS and PostgreSQL on the way out.
            console.print("demo interrupted: every process stopped.")
            raise typer.Exit(130) from None
