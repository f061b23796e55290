"""``lockstep-agent``: the node agent's command line.

``probe`` prints what this node runs (no bus, no credentials: a newcomer's first command on a
GPU box); ``run`` reports it to the bus until stopped.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from lockstep_agent.probes.node import NodeFacts, probe_node

# Exit statuses the systemd unit does not restart on (RestartPreventExitStatus): a restart cannot
# fix a bad config or credential, nor a server that refuses the node. A crash (Python's 1) is
# restarted.
BAD_INPUT = 2
STOPPED = 3

app = typer.Typer(
    name="lockstep-agent",
    help="Lockstep's node agent: probe this GPU node and report it to the bus.",
    no_args_is_help=True,
    add_completion=False,
)


@app.callback()
def _group() -> None:
    """Lockstep's node agent: probe this GPU node and report it to the bus."""


def _fail(message: str) -> NoReturn:
    typer.echo(f"lockstep-agent: {message}", err=True)
    raise typer.Exit(BAD_INPUT)


def describe(facts: NodeFacts) -> list[str]:
    """The facts as ``name: value`` lines for a person."""
    f, n = facts.files, facts.nvml
    lines = [
        f"kernel: {f.kernel or '-'}",
        f"nvidia module loaded: {f.loaded_module or '-'}",
        "driver (/proc): "
        + (
            f"{f.driver.version} ({'open' if f.driver.open_module else 'proprietary'} module)"
            if f.driver
            else "-"
        ),
        f"firmware dirs: {', '.join(f.firmware_dirs) or '-'}",
        f"cuda toolkit: {f.cuda or '-'}",
        f"nccl: {f.nccl or '-'}",
    ]
    lines += [f"nic {dev} firmware: {v}" for dev, v in f.nic_firmware.items()]
    if facts.dkms.error:
        lines.append(f"dkms: {facts.dkms.error}")
    lines += [
        f"dkms: {e.module}/{e.version} {e.kernel or ''} {e.status}".replace("  ", " ")
        for e in facts.dkms.entries
    ]
    if n.error:
        lines.append(f"nvml: {n.error}")
    else:
        lines.append(f"nvml: driver {n.driver_version}, cuda {n.cuda_driver_version}")
    for g in n.gpus:
        lines.append(
            f"gpu {g.index}: {g.name or '?'} vbios {g.vbios or '-'} gsp {g.gsp_firmware or '-'} "
            f"sm {g.sm_clock_mhz or '-'} MHz {g.temperature_c or '-'} C "
            f"throttle {','.join(g.throttle_reasons) or '-'}"
        )
    counts = facts.xids.counts()
    if facts.xids.error:
        lines.append(f"xids: kernel log not read: {facts.xids.error}")
    lines.append("xids this boot: " + (", ".join(f"{c} x{n}" for c, n in counts.items()) or "none"))
    return lines


@app.command()
def probe(
    as_json: Annotated[bool, typer.Option("--json", help="Print the facts as JSON.")] = False,
    root: Annotated[
        Path,
        typer.Option(
            help="Filesystem root to read (a copy of a node's files; NVML and DKMS "
            "are asked only of /)."
        ),
    ] = Path("/"),
) -> None:
    """Print what this node runs: driver, module, firmware, CUDA, NCCL, NICs, GPUs, XIDs."""
    if not root.is_dir():
        _fail(f"--root {root}: not a directory")
    facts = probe_node(root, None)
    if as_json:
        sys.stdout.write(json.dumps(facts.model_dump(mode="json"), indent=1) + "\n")
    else:
        typer.echo("\n".join(describe(facts)))


@app.command()
def run(
    config: Annotated[Path, typer.Option("--config", help="The agent's TOML configuration.")],
    log_level: Annotated[str, typer.Option(help="Log level.")] = "INFO",
) -> None:
    """Report this node's inventory and health to the bus until stopped (SIGTERM, SIGINT)."""
    from lockstep_agent.config import ConfigError, load
    from lockstep_agent.runner import AgentStopped, Runner
    from lockstep_agent.spool import SpoolError
    from lockstep_common.natsconn import AccessError

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(message)s")
    try:
        cfg = load(config)
        runner = Runner(cfg)
    except (ConfigError, AccessError, SpoolError) as exc:
        _fail(str(exc))

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, runner.stop.set)
        await runner.run()

    try:
        asyncio.run(main())
    except AgentStopped as exc:
        typer.echo(f"lockstep-agent: node {cfg.node}: {exc}", err=True)
        raise typer.Exit(STOPPED) from None


@app.command()
def command(
    file: Annotated[Path, typer.Argument(help="The command, as JSON (InbandCommand).")],
    config: Annotated[Path, typer.Option("--config", help="The agent's TOML configuration.")],
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print what would run; run and journal nothing.")
    ] = False,
) -> None:
    """Carry out one in-band command from a file (install-driver, rebuild-dkms, reboot, once
    per command id, journaled in <data_dir>/commands.sqlite; read-state: what the node runs);
    prints the outcome as JSON."""
    from lockstep_agent.commands import COMMAND_JOURNAL, Executor, load_command
    from lockstep_agent.config import ConfigError, load
    from lockstep_agent.reading import read_node

    try:
        cfg = load(config)
        cmd = load_command(file.read_text(encoding="utf-8"))
    except ConfigError as exc:
        _fail(str(exc))
    except OSError as exc:
        _fail(f"command {file}: {exc.strerror}")
    except ValueError as exc:  # not JSON, or not a command (pydantic's errors are ValueErrors)
        _fail(f"command {file}: {' '.join(str(exc).split())}")
    if (cmd.site, cmd.node_id) != (cfg.site, cfg.node):
        _fail(f"command {file}: names node {cmd.node_id} at {cmd.site}, not this node {cfg.node}")
    executor = Executor(cfg.data_dir / COMMAND_JOURNAL, reader=lambda: read_node(cfg.root))
    try:
        outcome = executor.execute(cmd, dry_run=dry_run)
    finally:
        executor.close()
    sys.stdout.write(outcome.model_dump_json(indent=1) + "\n")
    if outcome.status not in ("done", "dry-run"):
        raise typer.Exit(1)


def main() -> None:
    """Console script entry point."""
    app()
