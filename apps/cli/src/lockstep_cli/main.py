"""The ``lockstep`` command-line program.

Command groups live in their own modules and are imported only when used (``GROUPS``, see
lazy_group.py): ``lockstep --help`` and a Slurm prolog's ``lockstep fleet admit`` load no code
of the commands they do not run (issue 14, item 7). A new group is one line in ``GROUPS``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from lockstep_cli.cli_io import choose_stack, fail
from lockstep_cli.lazy_group import Lazy, LazyGroup
from lockstep_cli.stack_start import (
    chosen_services,
    moved_ports,
    start_refusals_are_one_line,
    started_servers,
    usable_data_dir,
)

if TYPE_CHECKING:
    from rich.console import Console

# name -> where the group is defined and its help (as the top-level help lists it; a test
# checks it is the group's own). Listed in this order after up and env. The demo and the
# benches stage databases and run services' code: they live in lockstep_bench (apps/bench),
# named here by string so that the operator CLI never imports them (pyproject.toml's contracts).
GROUPS: dict[str, Lazy] = {
    "demo": Lazy(
        "lockstep_bench.demo_cli",
        "demo",
        "Run the whole system on embedded NATS and PostgreSQL: an event's journey, drift found "
        "on a simulated fleet, then a canaried rollout and a bad image halted at the canary.",
        command=True,
    ),
    "console": Lazy(
        "lockstep_console.cli",
        "console",
        "Serve the read-only console: rollouts, a gate's evidence, the fleet (as `reader`).",
        command=True,
    ),
    "bench": Lazy(
        "lockstep_bench.cli",
        "bench_app",
        "Benchmarks: figures and the ratio to a baseline measured in the same run.",
    ),
    "docs": Lazy(
        "lockstep_cli.docs_cli",
        "docs_app",
        "Generated documentation (JSON Schemas, AsyncAPI, event table, state diagrams).",
    ),
    "bundle": Lazy("lockstep_cli.attest_cli", "bundle_app", "Build and verify release bundles."),
    "attest": Lazy("lockstep_cli.attest_cli", "attest_app", "Verify single pieces of evidence."),
    "sim": Lazy(
        "lockstep_sim.cli",
        "sim_app",
        "Fleet simulator: emulated Redfish BMCs on loopback addresses.",
    ),
    "fleet": Lazy(
        "lockstep_cli.fleet_cli",
        "fleet_app",
        "The fleet: import and list nodes, sweep them, conformance, drift, pins, admission.",
    ),
    "bmc": Lazy(
        "lockstep_cli.bmc_cli",
        "bmc_app",
        "One BMC before it joins a fleet: which profile it matches, how it would be flashed.",
    ),
    "dlq": Lazy(
        "lockstep_cli.dlq_cli", "dlq_app", "Dead letters: list, show, replay or purge them."
    ),
    "gate": Lazy(
        "lockstep_cli.gate_cli",
        "gate_app",
        "Health gate: replay the judge on recorded samples, or show a live gate's verdicts.",
    ),
    "node": Lazy("lockstep_cli.node_cli", "node_app", "One node: what Lockstep did to it."),
    "rollout": Lazy(
        "lockstep_cli.rollout_cli",
        "rollout_app",
        "Rollouts: plan, start, list, follow, pause, resume, abort, audit.",
    ),
    "fabric": Lazy(
        "lockstep_cli.fabric_cli",
        "fabric_app",
        "Fabric domains: current and target bundle, update state, lifecycle; pin a target.",
    ),
    "pool": Lazy(
        "lockstep_cli.pool_cli",
        "pool_app",
        "Maintenance windows per pool and per site: set them, show them.",
    ),
    "approver": Lazy(
        "lockstep_cli.approver_cli",
        "approver_app",
        "Approvers: make the Ed25519 key pair that signs rollout approvals.",
    ),
    "deploy": Lazy(
        "lockstep_cli.deploy_cli",
        "deploy_app",
        "A compose deployment: write its secrets, certificates and derived files.",
    ),
    "agent": Lazy(
        "lockstep_cli.agent_cli",
        "agent_app",
        "Node agents' NATS identities: enroll nodes, revoke them.",
    ),
    "topology": Lazy(
        "lockstep_cli.topology_cli", "topology_app", "JetStream streams and consumers."
    ),
}


class _Lockstep(LazyGroup):
    lazy = GROUPS


app = typer.Typer(
    cls=_Lockstep,
    help="Lockstep: keep a GPU fleet's firmware and software in lockstep.",
    no_args_is_help=True,
    add_completion=False,
)


def _console() -> Console:
    """Standard output for up (rich is imported by the commands that print with it)."""
    from lockstep_cli.cli_io import stdout_console

    return stdout_console()


def _print_version(wanted: bool) -> None:
    if wanted:
        from importlib.metadata import version

        print(f"lockstep {version('lockstep-cli')}")
        raise typer.Exit


@app.callback()
def lockstep(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version."
        ),
    ] = False,
) -> None:
    """Lockstep: keep a GPU fleet's firmware and software in lockstep."""
    # Every invocation starts from no --data-dir / -v: the fleet and dlq groups set their own
    # (one process may run several commands: tests, an embedding program).
    choose_stack(None, verbose=False)


DataDir = Annotated[
    Path, typer.Option("--data-dir", help="State of the embedded NATS and PostgreSQL.")
]


def _console_option(value: str) -> str:
    """``up --console``: refused with one line unless ``off`` or loopback."""
    from lockstep_cli.console_child import checked

    return checked(value)


@app.command()
def up(
    data_dir: DataDir = Path(".data"),
    service: Annotated[
        list[str] | None,
        typer.Option("--service", "-s", help="Run only these services (repeatable)."),
    ] = None,
    nats_cluster: Annotated[
        int | None,
        typer.Option(
            "--nats-cluster",
            metavar="N",
            help="Run N nats-servers (odd, 3 or more) in one cluster on loopback: streams and "
            "consumers get three replicas, and the updater and healthgate run two processes "
            "each.",
        ),
    ] = None,
    console_listen: Annotated[
        str,
        typer.Option(
            "--console",
            metavar="HOST:PORT",
            callback=_console_option,
            help="Serve the read-only console here, as `reader` (loopback; 'off': do not).",
        ),
    ] = "127.0.0.1:8080",
) -> None:
    """Start NATS, PostgreSQL, the services and the console; Ctrl-C stops everything.

    A service that crashes is restarted with backoff (1 s doubling to 60 s); one that exits for
    its configuration (exit codes 2, 3) stays stopped. Uses LOCKSTEP_NATS_URL /
    LOCKSTEP_DATABASE_URL instead of the embedded servers when set.

    With --nats-cluster 3 the stack survives the loss of one nats-server: every client is
    given all three URLs and fails over, and every stream keeps a copy on each server.
    """
    from rich.table import Table

    from lockstep_cli import console_child, stack_state
    from lockstep_cli.cli_io import settings_of
    from lockstep_cli.supervisor import (
        Interrupted,
        StackSettings,
        running_system,
        stop_signals_unwind,
        supervise,
    )
    from lockstep_common.db import redact_dsn
    from lockstep_devstack.nats_cluster import STREAM_REPLICAS, check_size

    names = chosen_services(service)
    if "LOCKSTEP_NATS_USER" in os.environ:
        fail(
            "LOCKSTEP_NATS_USER is set (from `lockstep env`?): lockstep up gives each service its "
            "own identity; run it where LOCKSTEP_NATS_* and LOCKSTEP_DATABASE_URL are not set"
        )
    # A bad LOCKSTEP_STREAM_* or other shared setting: one line now. Not from a state file:
    # up is what writes one.
    replicas = settings_of(StackSettings, find_stack=False).stream_replicas
    if nats_cluster is not None:
        try:
            check_size(nats_cluster)
        except ValueError as exc:
            fail(str(exc))
        if "LOCKSTEP_NATS_URL" in os.environ:
            fail(
                "--nats-cluster starts embedded nats-servers, but LOCKSTEP_NATS_URL names an "
                "external NATS: unset it, or drop --nats-cluster"
            )
        if "LOCKSTEP_STREAM_REPLICAS" in os.environ and replicas != STREAM_REPLICAS:
            fail(
                f"LOCKSTEP_STREAM_REPLICAS={replicas}: a --nats-cluster stack keeps "
                f"{STREAM_REPLICAS} replicas of every stream; unset it"
            )
    elif replicas > 1 and "LOCKSTEP_NATS_URL" not in os.environ:
        fail(
            f"LOCKSTEP_STREAM_REPLICAS={replicas} needs a NATS cluster: add --nats-cluster 3, "
            "or unset it"
        )
    usable_data_dir(data_dir)  # after the settings: nothing is made for a refused start

    console = _console()

    def report(line: str) -> None:
        console.print(line, highlight=False)

    with (
        stack_state.exclusive(data_dir),
        stop_signals_unwind(),
        start_refusals_are_one_line(),
    ):
        try:
            with (
                running_system(
                    data_dir.resolve(), names, report=report, nats_cluster=nats_cluster or 1
                ) as (stack, services),
                console_child.kept(stack, data_dir / "logs", console_listen, report) as (
                    console_row,
                    console_watch,
                ),
            ):
                # Before the table: whoever sees "is up" may run `lockstep env` at once.
                stack_state.save(
                    data_dir,
                    stack_state.StackState(
                        os.getpid(),
                        str(stack.nats_url),
                        str(stack.database_url),
                        tuple(stack.access or ()),
                        stack.access is not None and stack.nats is not None,
                        {svc.label: svc.metrics_url for svc in services},
                    ),
                )
                if (moved := moved_ports(started_servers(stack))) is not None:
                    report(moved)
                table = Table(title="Lockstep is up (Ctrl-C to stop)")
                table.add_column("part")
                table.add_column("where")
                table.add_row("NATS", str(stack.nats_url).replace(",", "\n"))
                # The admin's DSN names its password file, not the password: `lockstep env`
                # gives it to operators' commands (`lockstep fleet`, `lockstep dlq`).
                table.add_row("PostgreSQL (admin)", redact_dsn(str(stack.database_url)))
                for svc in services:
                    table.add_row(svc.label, f"{svc.metrics_url}  (log {svc.log_path})")
                table.add_row(*console_row)
                console.print(table)
                console.print(
                    f'other commands: [bold]eval "$(lockstep env --data-dir {data_dir})"[/]'
                )
                # Until Ctrl-C/SIGTERM: a crashed service is restarted with backoff; the stack
                # stops by itself only when no service is left that a restart could help.
                supervise(stack, services, report, also=[w for w in (console_watch,) if w])
                console.print("[red]no service left running; stopping everything[/]")
                raise typer.Exit(1)
        except (KeyboardInterrupt, Interrupted):
            console.print("stopping ...")
        finally:
            stack_state.remove(data_dir)
    console.print("stopped.")


@app.command("env")
def env_command(
    data_dir: DataDir = Path(".data"),
    identity: Annotated[
        str, typer.Option("--as", help="NATS identity: cli, agent, admin or a service.")
    ] = "cli",
) -> None:
    """Print the LOCKSTEP_* exports that reach the stack `lockstep up` runs under --data-dir.

    Use as `eval "$(lockstep env)"`. Secrets stay in their files (mode 0600): only paths are
    printed.
    """
    from lockstep_cli import stack_state

    print(stack_state.exports(data_dir.resolve(), identity))
