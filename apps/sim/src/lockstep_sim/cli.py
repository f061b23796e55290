"""``lockstep sim serve``: run the emulated fleet until interrupted.

Default credentials of every emulated BMC: user ``admin``, password ``lockstep-sim``.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import typer

from lockstep_sim.faults import FaultPlanError, load_faults
from lockstep_sim.profiles import PROFILES
from lockstep_sim.simulator import DEFAULT_PASSWORD, DEFAULT_USERNAME, Simulator

log = logging.getLogger(__name__)
sim_app = typer.Typer(help="Fleet simulator: emulated Redfish BMCs on loopback addresses.")


async def _serve_forever(sim: Simulator) -> None:
    async with sim:
        log.info(
            "serving %d BMCs from %s on port %d (started in %.2fs); fleet at %s/fleet.json",
            len(sim.fleet),
            sim.fleet[0].address,
            sim.port,
            sim.startup_seconds,
            sim.base_url,
        )
        await asyncio.Event().wait()


def serve(
    nodes: int,
    profile: str,
    latency_ms: float,
    time_scale: float,
    seed: int,
    username: str,
    password: str,
    host_base: str = "127.1.0.1",
    port: int = 8000,
    faults: Path | None = None,
) -> None:
    """Serve ``nodes`` BMCs until interrupted (blocks); ``faults`` is a JSON/YAML fault plan."""
    sim = Simulator(
        nodes,
        profile,
        latency_ms=latency_ms,
        time_scale=time_scale,
        seed=seed,
        username=username,
        password=password,
        host_base=host_base,
        port=port,
        faults=load_faults(faults) if faults is not None else None,
    )
    try:
        asyncio.run(_serve_forever(sim))
    except KeyboardInterrupt:
        log.info("simulator stopped")


@sim_app.command("serve")
def serve_command(
    nodes: int = typer.Option(4, "--nodes", min=1, help="Number of emulated nodes."),
    profile: str = typer.Option("gb200", "--profile", help=f"One of {', '.join(PROFILES)}."),
    latency_ms: float = typer.Option(0.0, "--latency-ms", help="Added latency per request."),
    time_scale: float = typer.Option(
        1.0, "--time-scale", min=0.0001, help="Real seconds per simulated BMC minute."
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of the fleet generator."),
    username: str = typer.Option(DEFAULT_USERNAME, "--username", help="BMC user name."),
    password: str = typer.Option(
        DEFAULT_PASSWORD, "--password", help="BMC password (default lockstep-sim)."
    ),
    host_base: str = typer.Option("127.1.0.1", "--host-base", help="First BMC address."),
    port: int = typer.Option(8000, "--port", help="Port shared by every BMC."),
    faults: str | None = typer.Option(
        None, "--faults", help="Fault plan file (JSON or YAML); see lockstep_sim.faults."
    ),
) -> None:
    """Serve the emulated BMCs; the fleet list is at http://<host-base>:<port>/fleet.json.

    On the first BMC's address also: /ledger (mutating calls), /faults (GET/PUT/DELETE) and
    /scenario (drift scenarios; the in-band kinds need node agents: use `sim run`).
    """
    if profile not in PROFILES:
        raise typer.BadParameter(f"choose one of {', '.join(PROFILES)}", param_hint="--profile")
    if faults is not None:
        try:
            load_faults(faults)
        except FaultPlanError as exc:
            raise typer.BadParameter(str(exc), param_hint="--faults") from None
    logging.basicConfig(level=logging.INFO)
    plan = Path(faults) if faults is not None else None
    serve(nodes, profile, latency_ms, time_scale, seed, username, password, host_base, port, plan)


from lockstep_sim.runtime import FleetRuntime  # noqa: E402 - appended after the serve command


async def _run_until_signalled(runtime: FleetRuntime) -> None:
    """Run ``runtime`` until SIGINT or SIGTERM, then stop it cleanly."""
    import signal

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    async with runtime:
        sim = runtime.simulator
        typer.echo(
            f"{len(sim.fleet)} BMCs on port {sim.port} from {sim.fleet[0].address} "
            f"(started in {sim.startup_seconds:.2f}s)"
        )
        typer.echo(f"fleet list: {runtime.fleet_url}")
        typer.echo(f"scheduler:  {runtime.scheduler_url}/scheduler/nodes")
        for subject in runtime.telemetry_subjects():
            typer.echo(f"telemetry:  {subject}")
        await stop.wait()
    typer.echo("fleet runtime stopped")


@sim_app.command("run")
def run_command(
    nodes: int = typer.Option(4, "--nodes", min=1, help="Number of emulated nodes."),
    profile: str = typer.Option("gb200", "--profile", help=f"One of {', '.join(PROFILES)}."),
    latency_ms: float = typer.Option(0.0, "--latency-ms", help="Added latency per BMC request."),
    time_scale: float = typer.Option(
        1.0, "--time-scale", min=0.0001, help="Real seconds per simulated BMC minute."
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of the fleet generator."),
    username: str = typer.Option(DEFAULT_USERNAME, "--username", help="BMC user name."),
    password: str = typer.Option(
        DEFAULT_PASSWORD, "--password", help="BMC password (default lockstep-sim)."
    ),
    port: int = typer.Option(8000, "--port", help="Port shared by every BMC (0: any free)."),
    scheduler_port: int = typer.Option(
        8001, "--scheduler-port", help="Scheduler API port on 127.0.0.1 (0: any free)."
    ),
    nats_url: str | None = typer.Option(
        None, "--nats-url", help="NATS server for agent telemetry (none: no agents)."
    ),
    namespace: str = typer.Option("lockstep", "--namespace", help="Subject namespace."),
    cadence_s: float = typer.Option(
        10.0, "--cadence-s", min=0.001, help="Real seconds between two reports of a node."
    ),
    faults: str | None = typer.Option(
        None, "--faults", help="Fault plan file (JSON or YAML); see lockstep_sim.faults."
    ),
) -> None:
    """Run BMCs, scheduler and (with --nats-url) node agents for one fleet until Ctrl-C."""
    if profile not in PROFILES:
        raise typer.BadParameter(f"choose one of {', '.join(PROFILES)}", param_hint="--profile")
    try:
        plan = load_faults(Path(faults)) if faults is not None else None
    except FaultPlanError as exc:
        raise typer.BadParameter(str(exc), param_hint="--faults") from None
    logging.basicConfig(level=logging.INFO)
    runtime = FleetRuntime(
        nodes,
        profile,
        latency_ms=latency_ms,
        time_scale=time_scale,
        seed=seed,
        username=username,
        password=password,
        port=port,
        scheduler_port=scheduler_port,
        nats_url=nats_url,
        namespace=namespace,
        cadence_s=cadence_s,
        faults=plan,
    )
    asyncio.run(_run_until_signalled(runtime))
