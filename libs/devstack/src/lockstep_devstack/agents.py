"""Node agents' identities: one nkey per node, enrolled and revoked by the operator.

A node's agent connects as ``agent-<node>`` and signs the server's nonce with its own nkey
seed (nats-server "NKeys" authentication; nkeys are Ed25519 key pairs in NATS's encoding). The
server holds only the public keys, so neither its configuration nor the enrolment record holds
a secret an agent could be impersonated with; the seed exists in the file written for the
operator to install on the node (mode 0600), nowhere else.

The record of who is enrolled is ``<data-dir>/agents.json`` (node -> site and public key),
rewritten whole and atomically under ``<data-dir>/.agents.lock``: two enrolments at once never
lose each other's nodes. ``nats.reload_running`` turns it into the servers' users.

Pure checks come first (``check_nodes``): bad input changes nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import nkeys  # type: ignore[import-untyped]

from lockstep_common.bus_access import Permissions, node_agent
from lockstep_common.identities import agent_identity
from lockstep_common.subjects import token

RECORD = "agents.json"
SEED_FILE = "{node}.nk"


class EnrolmentError(ValueError):
    """Bad input to enrol or revoke: one line naming what is wrong."""


@dataclass(frozen=True, slots=True)
class Enrolled:
    """One enrolled node agent: where its node is and the public half of its nkey."""

    node: str
    site: str
    public_key: str


COMMAND_REPLY_EXPIRES = "35m"
"""An agent's reply permission to a command it received lasts this long (nats-server duration)."""


def seed_dir(data_dir: Path) -> Path:
    """Where ``enroll`` writes the seeds by default (the stack's own agents read them)."""
    return data_dir / "secrets" / "agents"


def seed_path(directory: Path, node: str) -> Path:
    """The seed file of ``node``'s agent in ``directory``."""
    return directory / SEED_FILE.format(node=node)


def load(data_dir: Path) -> dict[str, Enrolled]:
    """Every enrolled agent, by node id (none when nothing was ever enrolled)."""
    try:
        raw = json.loads((data_dir / RECORD).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    return {
        node: Enrolled(node, str(entry["site"]), str(entry["nkey"])) for node, entry in raw.items()
    }


def _save(data_dir: Path, record: Mapping[str, Enrolled]) -> None:
    path = data_dir / RECORD
    tmp = path.with_name(path.name + ".tmp")
    body = {n: {"site": e.site, "nkey": e.public_key} for n, e in sorted(record.items())}
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump(body, out, indent=1)
    tmp.replace(path)


@contextlib.contextmanager
def _locked(data_dir: Path) -> Iterator[None]:
    data_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(data_dir / ".agents.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def check_nodes(nodes: Mapping[str, str]) -> None:
    """Every node id and site a subject token (EnrolmentError naming the first that is not)."""
    if not nodes:
        raise EnrolmentError("no node to enrol")
    for node, site in nodes.items():
        try:
            token(node, "node id")
            token(site, f"site of node {node}")
        except ValueError as exc:
            raise EnrolmentError(str(exc)) from None


def _write_seed(path: Path, seed: bytes) -> None:
    """The seed, mode 0600 from its creation (never readable by others, even for a moment)."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(seed + b"\n")
    tmp.replace(path)


def enroll(data_dir: Path, nodes: Mapping[str, str], out_dir: Path | None = None) -> list[Path]:
    """Give each node (id -> site) a new nkey: its seed written to ``out_dir`` (default
    ``seed_dir``; directory 0700, files 0600), its public key recorded. A node enrolled again
    gets a new key and its old one stops working at the next reload. Returns the seed files.

    Raises:
        EnrolmentError: a node id or site that is not a subject token (nothing written).
    """
    check_nodes(nodes)
    out_dir = out_dir or seed_dir(data_dir)
    out_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    out_dir.chmod(0o700)
    written: list[Path] = []
    with _locked(data_dir):
        record = load(data_dir)
        for node, site in nodes.items():
            seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
            public = nkeys.from_seed(bytearray(seed)).public_key.decode()
            path = seed_path(out_dir, node)
            _write_seed(path, bytes(seed))
            written.append(path)
            record[node] = Enrolled(node, site, public)
        _save(data_dir, record)
    return written


def revoke(data_dir: Path, nodes: list[str]) -> None:
    """Forget the nodes' keys (and delete their seeds from ``seed_dir``): from the next reload
    the server refuses them and closes their connections.

    Raises:
        EnrolmentError: a node that is not enrolled (nothing changed).
    """
    with _locked(data_dir):
        record = load(data_dir)
        unknown = [n for n in nodes if n not in record]
        if unknown:
            raise EnrolmentError(f"not enrolled: {', '.join(unknown)}")
        for node in nodes:
            del record[node]
        _save(data_dir, record)
    for node in nodes:
        seed_path(seed_dir(data_dir), node).unlink(missing_ok=True)


def nats_users(record: Mapping[str, Enrolled], template: Permissions) -> list[dict[str, object]]:
    """The ``authorization.users`` entries of the enrolled agents: each its public key and its
    node's grants (``bus_access.node_agent``)."""
    out: list[dict[str, object]] = []
    for e in sorted(record.values(), key=lambda e: e.node):
        grants = node_agent(template, e.site, e.node)
        permissions: dict[str, object] = {
            "publish": {"allow": list(grants.publish)},
            "subscribe": {"allow": list(grants.subscribe)},
        }
        if grants.responds:
            # The agent answers the updater's commands (node.command): once per request it
            # received, within the longest a command may run (a package manager's 30 min).
            permissions["allow_responses"] = {"max": 1, "expires": COMMAND_REPLY_EXPIRES}
        out.append({"nkey": e.public_key, "permissions": permissions})
    return out


def identity_of(node: str) -> str:
    """The NATS identity ``node``'s agent connects as."""
    return agent_identity(token(node, "node id"))
