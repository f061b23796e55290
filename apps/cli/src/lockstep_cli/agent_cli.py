"""``lockstep agent enroll|revoke``: one NATS identity per node agent (issue 26).

``enroll NODE...`` looks the nodes up in the inventory (``fleet.query``, as the ``cli``
identity) for their sites, makes each an nkey (``lockstep_devstack.agents``), writes the seeds
for the operator to install on the nodes (mode 0600; never printed) and has the running
nats-servers reload their users. ``revoke NODE...`` removes the keys and reloads: the nodes'
connections are closed and refused from then on, every other connection stays up.
Exit codes: 0 done, 2 bad input (a name that is not a node id, a node the inventory does not
know, one not enrolled) with nothing changed, 1 a server that did not reload.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from lockstep_cli.cli_io import fail, stdout_console

if TYPE_CHECKING:
    from lockstep_common.natsconn import NatsAccess

agent_app = typer.Typer(
    help="Node agents' NATS identities: enroll nodes, revoke them.", no_args_is_help=True
)
DataDir = Annotated[
    Path, typer.Option("--data-dir", help="Where `lockstep up` keeps the stack's state.")
]
Nodes = Annotated[list[str], typer.Argument(help="Node ids.", show_default=False)]


def fleet_sites(data_dir: Path) -> dict[str, str]:
    """Node id -> site of every node the running stack's inventory knows."""
    from lockstep_cli import stack_state
    from lockstep_common.identities import CLI

    state = stack_state.load(data_dir)
    return inventory_sites(stack_state.nats_access(data_dir, state, CLI))


CONNECT_TIMEOUT_S = 10.0
"""An unreachable server is one line (exit 3) after this long, never a retry forever."""


def inventory_sites(access: NatsAccess) -> dict[str, str]:
    """Node id -> site of every node the inventory reached with ``access`` knows."""
    from lockstep_cli.fleet_bus import InputError, Unavailable, connect_once
    from lockstep_common.fleet_query import FleetQuery, InventoryUnavailable
    from lockstep_common.subjects import Namespace

    async def ask() -> dict[str, str]:
        try:
            nc = await connect_once(access, CONNECT_TIMEOUT_S)
        except InputError as exc:
            fail(str(exc))
        except Unavailable as exc:
            fail(str(exc), code=3)
        try:
            fleet = await FleetQuery(
                nc, Namespace(os.environ.get("LOCKSTEP_NAMESPACE", "lockstep")), "cli"
            ).nodes(None)
        finally:
            await nc.close()
        return {n.node_id: n.site for n in fleet}

    try:
        return asyncio.run(ask())
    except InventoryUnavailable as exc:
        fail(str(exc), code=1)


def _sites(data_dir: Path, nodes: list[str]) -> dict[str, str]:
    """Node id -> site of ``nodes``; one line naming those the inventory does not know."""
    return known_sites(fleet_sites(data_dir), nodes)


def known_sites(known: dict[str, str], nodes: list[str]) -> dict[str, str]:
    """Node id -> site of ``nodes`` in ``known``; one line naming those it lacks."""
    unknown = [n for n in nodes if n not in known]
    if unknown:
        shown = ", ".join(unknown[:10]) + (
            f" and {len(unknown) - 10} more" if len(unknown) > 10 else ""
        )
        fail(f"unknown node(s) {shown}: not in the fleet (`lockstep fleet import` them first)")
    return {n: known[n] for n in nodes}


@agent_app.command("enroll")
def enroll(
    nodes: Annotated[list[str] | None, typer.Argument(help="Node ids.", show_default=False)] = None,
    every: Annotated[bool, typer.Option("--all", help="Every node the inventory knows.")] = False,
    data_dir: DataDir = Path(".data"),
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Write the seeds here, <node>.nk each (default <data-dir>/secrets/agents).",
        ),
    ] = None,
) -> None:
    """Give each node's agent its own NATS identity, allowed its own subjects only.

    Each node's seed is written to <out>/<node>.nk (mode 0600) for the operator to install on
    that node; the server is given the public key only. Enrolling a node again replaces its
    key. Thousands at once (or --all) are one reload.
    """
    from lockstep_devstack import agents
    from lockstep_devstack.nats import reload_running

    data_dir = data_dir.resolve()
    if every == bool(nodes):
        fail("name the nodes to enrol, or --all (not both)")
    if every:
        sites = fleet_sites(data_dir)
        if not sites:
            fail("the inventory knows no node: `lockstep fleet import` first")
    else:
        named = list(dict.fromkeys(nodes or ()))
        try:
            agents.check_nodes(dict.fromkeys(named, "site"))
        except agents.EnrolmentError as exc:
            fail(str(exc))
        sites = _sites(data_dir, named)
    written = agents.enroll(data_dir, sites, out)
    try:
        servers = reload_running(data_dir)
    except RuntimeError as exc:
        fail(str(exc), code=1)
    where = written[0].parent if written else out
    stdout_console().print(
        f"enrolled {len(written)} node agent(s); seeds in {where} (mode 0600, one per node: "
        f"install each on its node); {servers} nats-server(s) reloaded",
        highlight=False,
    )


@agent_app.command("revoke")
def revoke(nodes: Nodes, data_dir: DataDir = Path(".data")) -> None:
    """Withdraw nodes' identities at once.

    Their connections are closed and refused from then on; every other connection stays up
    (the servers reload their users, no restart).
    """
    from lockstep_devstack import agents
    from lockstep_devstack.nats import reload_running

    data_dir = data_dir.resolve()
    try:
        agents.check_nodes(dict.fromkeys(nodes, "site"))
        agents.revoke(data_dir, list(dict.fromkeys(nodes)))
    except agents.EnrolmentError as exc:
        fail(str(exc))
    try:
        servers = reload_running(data_dir)
    except RuntimeError as exc:
        fail(str(exc), code=1)
    stdout_console().print(
        f"revoked {len(set(nodes))} node agent(s); {servers} nats-server(s) reloaded",
        highlight=False,
    )
