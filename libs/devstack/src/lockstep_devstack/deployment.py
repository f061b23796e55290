"""``lockstep deploy init DIR``: every file a compose deployment needs that is secret or derived.

The same generators ``lockstep up`` uses, pointed at a deployment's names instead of the
loopback: a private CA and one certificate for the three NATS nodes (``tls.server_tls``, names
``nats-1..3``), a random password per NATS identity (``credentials``) and ``nats-auth.conf``, the
servers' users with a bcrypt hash of each and the grants of the generated permission matrix
(``nats.fixed_users``; docs/bus-access.md is the same matrix in words), a libpq password file per
service (``pgpass``, host ``postgres``) with the same passwords in ``postgres/roles`` for the
PostgreSQL image's initialisation (``deploy/postgres/init-roles.sh``), the superuser's password,
an empty approvers directory, an empty trust store for attest, and a BMC credentials template.

Layout (what ``compose.yaml`` mounts; directories 0700, secrets 0600, certificates 0644)::

    DIR/secrets/tls/{ca.pem,server.pem,server-key.pem}
    DIR/secrets/nats-auth.conf
    DIR/secrets/<identity>/nats-password        admin, cli, reader and each service
    DIR/secrets/<service>/pgpass
    DIR/secrets/postgres/{password,roles}
    DIR/secrets/bmc/credentials.json            a template: fill in before `fleet import`
    DIR/secrets/trust/trust.json                attest's trust store, empty: add signers' keys
    DIR/approvers/                              the planner's: <approver>.pem
    DIR/bundles/                                bundles attest and the updater read
    DIR/agents.json                             enrolled node agents: site, public key
    DIR/secrets/agents/<node>.nk                each enrolled node agent's nkey seed

Node agents are enrolled later (``enroll_agents``, ``lockstep deploy enroll``), once the fleet
is imported: each gets an nkey, its seed written for the node, its public key and its node's
grants added to ``nats-auth.conf``, which the servers read again on SIGHUP.

Compose bind-mounts each file as it is on the host, owner and mode included, and the
containers do not run as the host's user: the services as uid 10001 (the image's ``lockstep``),
PostgreSQL's initialisation as uid 70 (``postgres:16-alpine``). Run as root, ``init`` gives each
file to the user that reads it; otherwise ``owners()`` says which, for ``chown`` (or ``podman
unshare chown`` under rootless podman). The PostgreSQL image cannot read the services' pgpass
files (0600, uid 10001, as libpq demands of a password file): it reads its own ``roles`` file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from lockstep_common.bus_access import Permissions
from lockstep_common.identities import AGENT, SERVICE_NAMES, agent_node
from lockstep_devstack import agents, credentials, pgpass
from lockstep_devstack.nats import fixed_users
from lockstep_devstack.postgres import role_of
from lockstep_devstack.tls import server_tls

SERVICE_UID = 10001
"""The image's ``lockstep`` user (Dockerfile)."""
POSTGRES_UID = 70
"""``postgres:16-alpine``'s ``postgres`` user, which runs the initialisation scripts."""
NATS_NODES = ("nats-1", "nats-2", "nats-3")
POSTGRES_HOST = "postgres"
BMC_TEMPLATE = {
    "default": {"username": "CHANGE-ME", "password": "CHANGE-ME"},
    "nodes": {},
}

EMPTY_TRUST: dict[str, list[str]] = {"keys": []}


class DeploymentError(ValueError):
    """The directory cannot be initialised; one line naming it and why."""


@dataclass
class Deployment:
    """What ``init_deployment`` wrote: each path with the uid that must own it."""

    directory: Path
    owners: dict[Path, int] = field(default_factory=dict)


def _private_dir(path: Path) -> Path:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.chmod(0o700)
    return path


def _write_secret(path: Path, text: str) -> Path:
    """``path`` with ``text``, mode 0600 from the first byte."""
    _private_dir(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)
    return path


def _check_target(directory: Path, force: bool) -> None:
    if directory.is_symlink() or (directory.exists() and not directory.is_dir()):
        raise DeploymentError(f"{directory}: not a directory")
    if directory.is_dir() and any(directory.iterdir()) and not force:
        raise DeploymentError(
            f"{directory} is not empty: nothing written (--force writes new secrets into it, "
            "replacing those of a deployment already there)"
        )


def init_deployment(
    directory: Path, access: Mapping[str, Permissions], *, force: bool = False
) -> Deployment:
    """Write a deployment's secrets and derived files into ``directory`` (see the module).

    Args:
        access: NATS identity -> grants, the deployment's permission matrix
            (``lockstep_cli.catalog.bus_permissions``); a user per identity but the agents'.
        force: write into a non-empty directory, replacing what is there.

    Raises:
        DeploymentError: the directory is not empty (without ``force``), not a directory, or
            cannot be written; nothing is half-hidden: the message names the path.
    """
    _check_target(directory, force)
    try:
        return _write_all(directory, access)
    except OSError as exc:
        raise DeploymentError(f"{exc.filename or directory}: {exc.strerror or exc}") from None


def _write_all(directory: Path, access: Mapping[str, Permissions]) -> Deployment:
    out = Deployment(directory)
    secrets_dir = _private_dir(directory / "secrets")
    _private_dir(directory)
    tls = server_tls(secrets_dir / "tls", dns_names=NATS_NODES)
    out.owners.update({tls.ca: 0, tls.cert: 0, tls.key: 0})  # read by the NATS nodes (root)
    identities = [name for name in sorted(access) if agent_node(name) is None]
    for identity in identities:
        if credentials.path_of(directory, identity, "nats-password").exists():
            credentials.path_of(directory, identity, "nats-password").unlink()  # --force: anew
        out.owners[credentials.secret_file(directory, identity, "nats-password")] = SERVICE_UID
    users = fixed_users(
        {name: access[name] for name in identities},
        lambda name: credentials.path_of(directory, name, "nats-password"),
    )
    out.owners[_write_users(directory, users, access)] = 0
    roles = []
    for service in SERVICE_NAMES:
        password = credentials.read(credentials.secret_file(directory, service, "db-password"))
        credentials.path_of(directory, service, "db-password").unlink()  # only in the two below
        passfile = pgpass.passfile_path(secrets_dir, service)
        pgpass.write_password(passfile, role_of(service), password, hosts=(POSTGRES_HOST,))
        out.owners[passfile] = SERVICE_UID
        roles.append(f"{role_of(service)}:{password}\n")
    postgres = secrets_dir / "postgres"
    out.owners[_write_secret(postgres / "roles", "".join(roles))] = POSTGRES_UID
    superuser = credentials.read(credentials.secret_file(directory, "postgres", "superuser"))
    (postgres / "superuser").unlink()
    out.owners[_write_secret(postgres / "password", superuser + "\n")] = POSTGRES_UID
    bmc = _write_secret(secrets_dir / "bmc" / "credentials.json", json.dumps(BMC_TEMPLATE) + "\n")
    out.owners[bmc] = SERVICE_UID
    for private in (secrets_dir / "trust", directory / "approvers"):
        out.owners[_private_dir(private)] = SERVICE_UID
    # An empty trust store: attest starts and rejects every bundle until a signer's key is
    # added (docs/bundles.md, "Trust store"); without trust.json it would not start at all.
    trust = _write_secret(secrets_dir / "trust" / "trust.json", json.dumps(EMPTY_TRUST) + "\n")
    out.owners[trust] = SERVICE_UID
    bundles = directory / "bundles"
    bundles.mkdir(exist_ok=True)
    out.owners[bundles] = SERVICE_UID
    if os.geteuid() == 0:  # the directories above stay root's: the engine mounts each file
        for path, uid in out.owners.items():
            os.chown(path, uid, uid)
    return out


def _auth_file(directory: Path) -> Path:
    return directory / "secrets" / "nats-auth.conf"


def _write_users(
    directory: Path, fixed: list[dict[str, object]], access: Mapping[str, Permissions]
) -> Path:
    """``nats-auth.conf``: the fixed identities' users and one nkey user per node agent
    enrolled in ``directory`` (``agents.json``), each with its node's grants. Written in place,
    never replaced: compose bind-mounts the file itself, and a container keeps seeing the old
    file when a new one is moved over it (the servers read it again on SIGHUP)."""
    users = list(fixed)
    if AGENT in access:
        users += agents.nats_users(agents.load(directory), access[AGENT])
    return _write_secret(
        _auth_file(directory),
        "# Generated by `lockstep deploy init`: every identity's bcrypt hash (never a password)\n"
        "# and its grants (docs/bus-access.md); node agents' public keys from `deploy enroll`.\n"
        "authorization: " + json.dumps({"users": users}, indent=1) + "\n",
    )


def enroll_agents(
    directory: Path, sites: Mapping[str, str], access: Mapping[str, Permissions]
) -> list[Path]:
    """Give each node (id -> site) of a deployment initialised in ``directory`` its agent's
    nkey (``agents.enroll``): the seed in ``DIR/secrets/agents/<node>.nk`` (0600; uid 10001's
    as root, the simulator's or an agent container's user), the public key and the node's
    grants in ``nats-auth.conf``, the fixed identities' users kept as they are. A node enrolled
    again gets a new key. Returns the seed files.

    Raises:
        DeploymentError: ``directory`` holds no deployment, or a node id or site is not a
            subject token (nothing written).
    """
    auth = _auth_file(directory)
    try:
        text = auth.read_text(encoding="utf-8")
        current = json.loads(text[text.index("{") :])["users"]
    except (OSError, ValueError, KeyError) as exc:
        raise DeploymentError(f"{auth}: not a deployment's users ({exc})") from None
    fixed = [user for user in current if "user" in user]  # agents' entries: "nkey"
    try:
        written = agents.enroll(directory, sites, directory / "secrets" / "agents")
    except agents.EnrolmentError as exc:
        raise DeploymentError(str(exc)) from None
    _write_users(directory, fixed, access)
    if os.geteuid() == 0:
        for path in [written[0].parent, *written]:
            os.chown(path, SERVICE_UID, SERVICE_UID)
    return written
