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
