"""``lockstep deploy init DIR``: a compose deployment's secrets and derived files
(``lockstep_devstack.deployment``), so nothing of them is written by hand and none is in
``compose.yaml``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from lockstep_cli.cli_io import fail, stdout_console

deploy_app = typer.Typer(
    help="A compose deployment: write its secrets, certificates and derived files.",
    no_args_is_help=True,
)
console = stdout_console()


@deploy_app.command("init")
def init(
    directory: Annotated[
        Path, typer.Argument(help="Where to write them (compose.yaml's LOCKSTEP_DEPLOY_DIR).")
    ],
    force: Annotated[
        bool,
        typer.Option("--force", help="Write into a non-empty DIR, replacing every secret there."),
    ] = False,
) -> None:
    """Write the NATS CA and certificate, nats-auth.conf (every identity's bcrypt hash and its
    grants), a password per NATS identity, a pgpass file per service, PostgreSQL's role file,
    the approvers directory, attest's trust store and a BMC credentials template into DIR
    (directories 0700, secrets 0600). Then: `LOCKSTEP_DEPLOY_DIR=DIR docker compose up -d`."""
    from lockstep_cli.catalog import bus_permissions
    from lockstep_common.subjects import Namespace
    from lockstep_devstack.deployment import DeploymentError, init_deployment

    namespace = Namespace(os.environ.get("LOCKSTEP_NAMESPACE", "lockstep"))
    try:
        made = init_deployment(directory, bus_permissions(namespace), force=force)
    except DeploymentError as exc:
        fail(str(exc))
    console.print(f"wrote a deployment's secrets into {directory} ({len(made.owners)} files)")
    console.print(
        f"next: fill in {directory}/secrets/bmc/credentials.json, put approvers' .pem files in "
        f"{directory}/approvers and bundle signers' keys in {directory}/secrets/trust"
    )
    if os.geteuid() != 0:
        console.print(
            "owners: run as root each file is given to the container user that reads it (uid "
            "10001 the services', 70 PostgreSQL's); as yourself, chown them so (rootless "
            "podman: `podman unshare chown`), as docs/operations.md shows"
        )


@deploy_app.command("enroll")
def enroll(
    directory: Annotated[Path, typer.Argument(help="The deployment's directory (`deploy init`).")],
    nodes: Annotated[list[str] | None, typer.Argument(help="Node ids.", show_default=False)] = None,
    every: Annotated[bool, typer.Option("--all", help="Every node the inventory knows.")] = False,
    nats_url: Annotated[
        str,
        typer.Option(
            "--nats-url",
            envvar="LOCKSTEP_NATS_URL",
            help="The deployment's NATS, as this machine reaches it (compose publishes nats-1 "
            "on LOCKSTEP_NATS_PORT, 4222 unless set).",
        ),
    ] = "tls://127.0.0.1:4222",
) -> None:
    """Give each node's agent its own NATS identity in a compose deployment.

    The nodes' sites are asked of the inventory as the deployment's `cli` identity (its
    password and CA under DIR/secrets). Each node's nkey seed is written to
    DIR/secrets/agents/<node>.nk (mode 0600) for its agent; the public key and the node's
    grants are added to DIR/secrets/nats-auth.conf. Then have the servers read it again:
    `docker compose kill -s HUP nats-1 nats-2 nats-3` (connections stay up).
    """
    from lockstep_cli.agent_cli import inventory_sites, known_sites
    from lockstep_cli.catalog import bus_permissions
    from lockstep_common.natsconn import AccessError, NatsAccess
    from lockstep_common.settings import check_nats_url
    from lockstep_common.subjects import Namespace
    from lockstep_devstack import agents
    from lockstep_devstack.deployment import DeploymentError, enroll_agents

    if every == bool(nodes):
        fail("name the nodes to enrol, or --all (not both)")
    named = list(dict.fromkeys(nodes or ()))
    try:
        check_nats_url(nats_url)
    except ValueError as exc:
        fail(f"--nats-url: {exc}")
    try:
        if named:
            agents.check_nodes(dict.fromkeys(named, "site"))
    except agents.EnrolmentError as exc:
        fail(str(exc))
    secrets = directory / "secrets"
    access = NatsAccess.from_url(
        nats_url, "cli", secrets / "cli" / "nats-password", secrets / "tls" / "ca.pem"
    )
    try:
        access.options()  # the password file missing or open to others: refused now
    except AccessError as exc:
        fail(f"{directory}: {exc}")
    known = inventory_sites(access)
    if every and not known:
        fail("the inventory knows no node: `lockstep fleet import` first")
    sites = known if every else known_sites(known, named)
    namespace = Namespace(os.environ.get("LOCKSTEP_NAMESPACE", "lockstep"))
    try:
        written = enroll_agents(directory, sites, bus_permissions(namespace))
    except DeploymentError as exc:
        fail(str(exc))
    console.print(
        f"enrolled {len(written)} node agent(s); seeds in {directory}/secrets/agents (mode "
        "0600, one per node); next: `docker compose kill -s HUP nats-1 nats-2 nats-3` (podman "
        "kill --signal HUP ...) so the servers read the new users",
        highlight=False,
    )
