"""``lockstep sim serve``: run the emulated fleet until interrupted.

Default credentials of every emulated BMC: user ``admin``, password ``lockstep-sim``.
"""

from __future__ import annotations

import asyncio
import logging

import typer

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
) -> None:
    """Serve ``nodes`` BMCs until interrupted (blocks)."""
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
        1.0, "--time-scale", help="Seconds of simulation per minute of real BMC time."
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of the fleet generator."),
    username: str = typer.Option(DEFAULT_USERNAME, "--username", help="BMC user name."),
    password: str = typer.Option(
        DEFAULT_PASSWORD, "--password", help="BMC password (default lockstep-sim)."
    ),
    host_base: str = typer.Option("127.1.0.1", "--host-base", help="First BMC address."),
    port: int = typer.Option(8000, "--port", help="Port shared by every BMC."),
) -> None:
    """Serve the emulated BMCs; the fleet list is at http://<host-base>:<port>/fleet.json."""
    if profile not in PROFILES:
        raise typer.BadParameter(f"choose one of {', '.join(PROFILES)}", param_hint="--profile")
    logging.basicConfig(level=logging.INFO)
    serve(nodes, profile, latency_ms, time_scale, seed, username, password, host_base, port)
