"""``lockstep sim serve``: run the emulated fleet until interrupted.

Default credentials of every emulated BMC: user ``admin``, password ``lockstep-sim``.
"""

from __future__ import annotations

import asyncio
import errno
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from lockstep_sim.cli_options import sim_options
from lockstep_sim.options import SimOptions

if TYPE_CHECKING:
    from lockstep_common.natsconn import NatsAccess
    from lockstep_sim.runtime import FleetRuntime
    from lockstep_sim.simulator import Simulator

log = logging.getLogger(__name__)
sim_app = typer.Typer(help="Fleet simulator: emulated Redfish BMCs on loopback addresses.")


async def _serve_forever(sim: Simulator) -> None:
    async with sim:
        log.info(
            "serving %d BMCs %s (started in %.2fs); fleet at %s/fleet.json",
            len(sim.fleet),
            sim.listening,
            sim.startup_seconds,
            sim.base_url,
        )
        await asyncio.Event().wait()


def serve(options: SimOptions) -> None:
    """Serve the emulated BMCs until interrupted (blocks)."""
    from lockstep_sim.simulator import Simulator

    try:
        asyncio.run(_serve_forever(Simulator(options)))
    except KeyboardInterrupt:
        log.info("simulator stopped")
    except OSError as exc:
        _refuse_port_in_use(exc, f"--port {options.port} from {options.host_base}")


@sim_app.command("serve")
@sim_options
def serve_command(sim: SimOptions) -> None:
    """Serve the emulated BMCs; the fleet list is at http://<host-base>:<port>/fleet.json.

    On the first BMC's address also: /ledger (mutating calls), /faults (GET/PUT/DELETE) and
    /scenario (drift scenarios; the in-band kinds need node agents: use `sim run`).
    """
    logging.basicConfig(level=logging.INFO)
    serve(sim)


async def _run_until_signalled(runtime: FleetRuntime) -> None:
    """Run ``runtime`` until SIGINT or SIGTERM, then stop it cleanly."""
    import signal

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    async with runtime:
        sim = runtime.simulator
        typer.echo(f"{len(sim.fleet)} BMCs {sim.listening} (started in {sim.startup_seconds:.2f}s)")
        typer.echo(f"fleet list: {runtime.fleet_url}")
        typer.echo(f"scheduler:  {runtime.scheduler_url}/scheduler/nodes")
        for subject in runtime.telemetry_subjects():
            typer.echo(f"telemetry:  {subject}")
        await stop.wait()
    typer.echo("fleet runtime stopped")


@sim_app.command("run")
@sim_options
def run_command(
    sim: SimOptions,
    scheduler_port: int = typer.Option(
        8001,
        "--scheduler-port",
        help="Scheduler API port on 127.0.0.1 (--advertise: every interface; 0: any free).",
    ),
    nats_url: str | None = typer.Option(
        None,
        "--nats-url",
        envvar="LOCKSTEP_NATS_URL",
        help="NATS server for agent telemetry (none: no agents).",
    ),
    nats_user: str | None = typer.Option(
        None, "--nats-user", envvar="LOCKSTEP_NATS_USER", help="NATS identity of the agents."
    ),
    nats_password_file: Annotated[
        Path | None,
        typer.Option(
            "--nats-password-file",
            envvar="LOCKSTEP_NATS_PASSWORD_FILE",
            help="File holding that identity's password (mode 0600).",
        ),
    ] = None,
    nats_ca_file: Annotated[
        Path | None,
        typer.Option(
            "--nats-ca-file",
            envvar="LOCKSTEP_NATS_CA_FILE",
            help="CA certificate to verify the NATS server with (TLS).",
        ),
    ] = None,
    agent_seeds: Annotated[
        Path | None,
        typer.Option(
            "--agent-seeds",
            help="Directory of node agents' nkey seeds (<node>.nk, `lockstep agent enroll`): "
            "each node's agent connects as its own identity (agent-<node>), not as --nats-user.",
        ),
    ] = None,
    create_streams: bool = typer.Option(
        False,
        "--create-streams",
        help="Create the JetStream streams first (an open development server, no service).",
    ),
    namespace: str = typer.Option("lockstep", "--namespace", help="Subject namespace."),
    cadence_s: float = typer.Option(
        10.0, "--cadence-s", min=0.001, help="Real seconds between two reports of a node."
    ),
) -> None:
    """Run BMCs, scheduler and (with --nats-url) node agents for one fleet until Ctrl-C: each
    node runs the agent's own code with simulated probes, publishing its reports and answering
    the updater's in-band commands on agent.command.<site>.<node>.

    The agents' health series and the health scenarios of --faults or PUT /faults (a bad
    image, a thermal event, a network problem) are described in docs/simulator.md; ready-made
    plans are in examples/health/.
    """
    logging.basicConfig(level=logging.INFO)
    nats = None
    if nats_url is not None:
        from lockstep_common.natsconn import AccessError, NatsAccess
        from lockstep_common.settings import check_nats_url

        try:
            check_nats_url(nats_url)
        except ValueError as exc:
            _fail(f"--nats-url: {exc}")
        try:
            nats = NatsAccess.from_url(nats_url, nats_user, nats_password_file, nats_ca_file)
            nats.options()  # an unreadable or world-readable password file: refused now
        except AccessError as exc:
            raise typer.BadParameter(str(exc)) from None
    from lockstep_sim.runtime import FleetRuntime

    agent_access = None
    if agent_seeds is not None:
        if nats is None:
            _fail("--agent-seeds needs --nats-url")
        if not agent_seeds.is_dir():
            _fail(f"--agent-seeds {agent_seeds}: not a directory")
        agent_access = _own_identities(nats, agent_seeds)
    if nats is not None:
        # With --agent-seeds the agents need no shared identity: probe as the first node's.
        probe = nats if agent_access is None else agent_access("node-00000")
        problem = asyncio.run(_unreachable(probe))
        if problem:
            _fail(f"NATS at {nats_url} unreachable: {problem}")
    runtime = FleetRuntime(
        sim,
        scheduler_port=scheduler_port,
        nats=nats,
        agent_access=agent_access,
        namespace=namespace,
        cadence_s=cadence_s,
        create_streams=create_streams,
    )
    try:
        asyncio.run(_run_until_signalled(runtime))
    except OSError as exc:
        _refuse_port_in_use(exc, f"--port {sim.port} or --scheduler-port {scheduler_port}")


def _own_identities(nats: NatsAccess, seeds: Path) -> Callable[[str], NatsAccess]:
    """How each node's agent connects: the servers and CA of ``nats``, as ``agent-<node>``
    with the seed ``seeds/<node>.nk``."""
    import dataclasses

    from lockstep_common.identities import agent_identity

    def access(node: str) -> NatsAccess:
        return dataclasses.replace(
            nats,
            user=agent_identity(node),
            password_file=None,
            nkey_file=seeds / f"{node}.nk",
        )

    return access


def _refuse_port_in_use(exc: OSError, ports: str) -> NoReturn:
    """A port already taken is bad input (one line naming it); other errors rise."""
    if exc.errno != errno.EADDRINUSE:
        raise exc
    # aiohttp's message names the address of the scheduler's port; the BMCs' names none.
    _fail(f"{exc.strerror or exc} ({ports}): choose another port (0: any free)")


def _fail(message: str) -> NoReturn:
    """One line on stderr and exit 2: bad input, never a traceback (as lockstep_cli.cli_io)."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


async def _unreachable(access: NatsAccess) -> str | None:
    """Why NATS cannot be reached, or None: tried once, so a wrong URL is one line at once
    rather than nats-py retrying (and logging a traceback) every two seconds."""
    from lockstep_common.errors import describe
    from lockstep_common.natsconn import connect

    async def quiet(exc: Exception) -> None:
        return None  # reported once, by the caller

    try:
        nc = await connect(
            access,
            name="lockstep-sim-probe",
            connect_timeout=5,
            allow_reconnect=False,
            max_reconnect_attempts=1,
            reconnect_time_wait=0.1,
            error_cb=quiet,
        )
    except Exception as exc:  # noqa: BLE001 - any failure to connect is the answer
        return describe(exc)
    await nc.close()
    return None
