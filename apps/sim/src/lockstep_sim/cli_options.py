"""The options ``sim serve`` and ``sim run`` share: declared once, checked once, and handed to
either command as one :class:`SimOptions`."""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from lockstep_sim.dialects import DIALECTS
from lockstep_sim.faults import FaultPlanError, load_faults
from lockstep_sim.options import DEFAULT_PASSWORD, DEFAULT_USERNAME, SimOptions
from lockstep_sim.profiles import PROFILES

PASSWORD_VARIABLE = "LOCKSTEP_SIM_PASSWORD"  # noqa: S105 - the variable's name, not a secret


def _option(name: str, annotation: Any, info: Any) -> inspect.Parameter:
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, default=info, annotation=annotation
    )


SHARED = (
    _option("nodes", int, typer.Option(4, "--nodes", min=1, help="Number of emulated nodes.")),
    _option(
        "profile", str, typer.Option("gb200", "--profile", help=f"One of {', '.join(PROFILES)}.")
    ),
    _option(
        "dialect",
        str,
        typer.Option(
            "lockstep",
            "--dialect",
            help=f"Redfish dialect every BMC speaks: one of {', '.join(DIALECTS)} "
            "(docs/updater.md, BMC profiles).",
        ),
    ),
    _option(
        "latency_ms",
        float,
        typer.Option(0.0, "--latency-ms", help="Added latency per BMC request."),
    ),
    _option(
        "time_scale",
        float,
        typer.Option(
            1.0, "--time-scale", min=0.0001, help="Real seconds per simulated BMC minute."
        ),
    ),
    _option("seed", int, typer.Option(0, "--seed", help="Seed of the fleet generator.")),
    _option("username", str, typer.Option(DEFAULT_USERNAME, "--username", help="BMC user name.")),
    _option(
        "password_file",
        Path | None,
        typer.Option(
            None,
            "--password-file",
            help=f"File holding the BMC password; else ${PASSWORD_VARIABLE}; else "
            f"{DEFAULT_PASSWORD}. Never on the command line, where any local user sees it.",
        ),
    ),
    _option("host_base", str, typer.Option("127.1.0.1", "--host-base", help="First BMC address.")),
    _option(
        "port", int, typer.Option(8000, "--port", help="Port shared by every BMC (0: any free).")
    ),
    _option(
        "advertise",
        str | None,
        typer.Option(
            None,
            "--advertise",
            help="Host name others reach this machine by (a container's service name): every "
            "BMC then listens on all interfaces, each on its own port from --port, and so does "
            "`sim run`'s scheduler; /fleet.json names http://HOST:PORT.",
        ),
    ),
    _option(
        "faults",
        Path | None,
        typer.Option(
            None,
            "--faults",
            help="Fault plan (JSON or YAML): BMC faults, health scenarios (docs/simulator.md).",
        ),
    ),
)


def _password(path: Path | None) -> str:
    if path is None:
        return os.environ.get(PASSWORD_VARIABLE) or DEFAULT_PASSWORD
    try:
        password = path.read_text(encoding="utf-8").rstrip("\r\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise typer.BadParameter(
            f"cannot read {path}: {exc}", param_hint="--password-file"
        ) from None
    if not password:
        raise typer.BadParameter(f"{path} is empty", param_hint="--password-file")
    return password


def _checked(
    profile: str, dialect: str, faults: Path | None, password_file: Path | None, **rest: Any
) -> SimOptions:
    if profile not in PROFILES:
        raise typer.BadParameter(f"choose one of {', '.join(PROFILES)}", param_hint="--profile")
    if dialect not in DIALECTS:
        raise typer.BadParameter(f"choose one of {', '.join(DIALECTS)}", param_hint="--dialect")
    try:
        plan = load_faults(faults) if faults is not None else None
    except FaultPlanError as exc:
        raise typer.BadParameter(str(exc), param_hint="--faults") from None
    return SimOptions(
        profile=profile, dialect=dialect, faults=plan, password=_password(password_file), **rest
    )


def sim_options(command: Callable[..., None]) -> Callable[..., None]:
    """``command(sim: SimOptions, *its own options)`` as a typer command that also takes the
    shared options (listed first), checks them, and passes them as ``sim``."""
    own = [
        p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
        for p in inspect.signature(command, eval_str=True).parameters.values()
        if p.name != "sim"
    ]

    def typer_command(**values: Any) -> None:
        shared = {p.name: values.pop(p.name) for p in SHARED}
        command(_checked(**shared), **values)

    # typer reads a command's options from its signature: give it the shared ones and the
    # command's own (no functools.wraps: typer would then resolve names in the wrong module).
    typer_command.__name__ = command.__name__
    typer_command.__doc__ = command.__doc__
    setattr(typer_command, "__signature__", inspect.Signature([*SHARED, *own]))  # noqa: B010
    return typer_command
