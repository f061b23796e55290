"""``lockstep fleet admit`` in the common case, without pydantic, asyncio, nats-py or rich.

A Slurm prolog runs ``fleet admit`` for every job (issue 14, item 7: <= 0.3 s). The command's
full path builds the inventory's settings (pydantic-settings) and the request and answer
models, and asks with nats-py: 0.5 s and more before anything is sent. This module asks the
same question when everything is ordinary: only the variables below set, a well-formed hash
and node ids, ``nats://``/``tls://`` servers. Anything else (another ``LOCKSTEP_*`` variable,
a bad value, ``-v``) returns None from :func:`target` or :func:`request_body`, and the full
path runs and reports it exactly as before. The connection is authenticated as on the full
path (TLS verified against the CA, the identity's password from its file): nats_request.py.

The request is the CloudEvents envelope ``make_envelope(AdmissionCheckRequested(...))``
writes, and the answer is read as ``AdmissionCheckAnswered``'s fields; tests compare both
with the models (tests/unit/cli/test_admit_quick.py).
"""

from __future__ import annotations

import datetime as dt
import difflib
import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from lockstep_common.identities import CLI, SERVICE_NAMES
from lockstep_common.natsconn import NatsAccess
from lockstep_common.subjects import Namespace, admission_check, token

# The variables the quick path reads or may ignore. Another under the inventory's or the NATS
# prefix, or one a character or two from these (a typo), sends the command down the full path,
# which validates and reports it; other services' variables, a test harness's or credential
# references (env:PREFIX) are ignored there too, and here.
VARIABLES = frozenset(
    {
        "LOCKSTEP_NATS_URL",
        "LOCKSTEP_NATS_USER",
        "LOCKSTEP_NATS_PASSWORD_FILE",
        "LOCKSTEP_NATS_CA_FILE",
        "LOCKSTEP_NAMESPACE",
        "LOCKSTEP_DATA_DIR",
        "LOCKSTEP_DATABASE_URL",  # admit does not use the database
    }
)
DEFAULT_NAMESPACE = "lockstep"  # ServiceSettings.namespace's default (a test checks)
MAX_NODES = 50_000  # events.v1.MAX_NODES (a test checks)
MAX_REPLY_BYTES = 4 << 20  # one verdict per node of a large job
HASH = re.compile(r"[0-9a-f]{64}")
NODE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")  # vocabulary.TOKEN_PATTERN
REQUESTED = ("lockstep.admission.check.requested", 1)
ANSWERED = ("lockstep.admission.check.answered", 1)
SOURCE = "/lockstep/cli"  # envelope.source_of("cli")
SCHEMES = ("nats", "tls")
OTHERS = tuple(f"LOCKSTEP_{s.upper()}_" for s in SERVICE_NAMES if s != "inventory")


@dataclass(frozen=True, slots=True)
class Target:
    """Where to ask and as whom."""

    access: NatsAccess
    subject: str


def target(environ: Mapping[str, str], data_dir: Path) -> Target | None:
    """The NATS access and subject the inventory's settings would give, or None when the
    full settings must decide (another variable set, a value the quick path does not check).

    With no ``LOCKSTEP_NATS_URL``, the stack running under ``data_dir`` (its state file), as
    ``settings_of`` does; no stack there is the same one line (exit 2).
    """
    if any(_for_the_full_path(k) for k in environ):
        return None
    if "LOCKSTEP_NATS_URL" in environ:
        url = environ["LOCKSTEP_NATS_URL"]
        user = environ.get("LOCKSTEP_NATS_USER")
        password = _path(environ.get("LOCKSTEP_NATS_PASSWORD_FILE"))
        ca = _path(environ.get("LOCKSTEP_NATS_CA_FILE"))
    else:
        from lockstep_cli import stack_state

        defaults, _ = stack_state.connection_defaults(data_dir, CLI, environ)
        url = defaults["nats_url"]
        user, password, ca = (
            defaults["nats_user"],
            defaults["nats_password_file"],
            defaults["nats_ca_file"],
        )
    namespace = environ.get("LOCKSTEP_NAMESPACE", DEFAULT_NAMESPACE)
    try:
        token(namespace, "namespace")
        access = NatsAccess.from_url(url, user, password, ca)
        access.options()  # the password file (mode 0600, one line) and the CA readable
    except ValueError:  # AccessError too: the full settings name what is wrong
        return None
    if not all(_plain_url(u) for u in access.servers):
        return None
    return Target(access, Namespace(namespace).wire(admission_check()))


def request_body(stack_hash: str, node_ids: list[str], *, now: dt.datetime) -> bytes | None:
    """The request envelope, or None when the input needs the full path's messages."""
    if not HASH.fullmatch(stack_hash) or not 0 < len(node_ids) <= MAX_NODES:
        return None
    if not all(NODE_ID.fullmatch(n) for n in node_ids):
        return None
    envelope = {
        "specversion": "1.0",
        "id": str(uuid.uuid4()),
        "source": SOURCE,
        "type": REQUESTED[0],
        "schemaversion": REQUESTED[1],
        "time": now.astimezone(dt.UTC).isoformat().replace("+00:00", "Z"),
        "datacontenttype": "application/json",
        "dataschema": "urn:lockstep:schema:admission.check.requested:v1",
        "data": {"stack_hash": stack_hash, "node_ids": node_ids},
    }
    return json.dumps(envelope, separators=(",", ":")).encode()


class BadReply(ValueError):
    """A reply that is not an admission answer; the message says what it is instead."""


class ServiceRefused(ValueError):
    """The inventory answered with an error: the request was bad."""


def answer_doc(data: bytes, error_header: str | None) -> dict[str, Any]:
    """``fleet admit --json``'s document from the inventory's reply.

    Raises:
        ServiceRefused: the service's error.
        BadReply: the reply is not an ``admission.check.answered`` envelope.
    """
    error = error_of(data, error_header)
    if error is not None:
        raise ServiceRefused(f"inventory refused the request: {error}")
    if len(data) > MAX_REPLY_BYTES:
        raise BadReply(f"reply of {len(data)} bytes exceeds {MAX_REPLY_BYTES}")
    try:
        envelope = json.loads(data)
        if (envelope["type"], envelope["schemaversion"]) != ANSWERED:
            raise BadReply(f"unexpected reply type {envelope['type']!r}")
        answer = envelope["data"]
        nodes = [_node(n) for n in answer["nodes"]]
        stack_hash = answer["stack_hash"]
    except (ValueError, KeyError, TypeError) as exc:
        if isinstance(exc, BadReply):
            raise
        raise BadReply(f"not an admission answer ({type(exc).__name__} {exc})") from None
    if not isinstance(stack_hash, str):
        raise BadReply("not an admission answer (stack_hash)")
    return {
        "stack_hash": stack_hash,
        "admitted": all(n["admitted"] for n in nodes),
        "nodes": nodes,
    }


def plain_lines(doc: dict[str, Any]) -> list[str]:
    """The answer as ``print_admit`` shows it on a pipe or in a file (no colour)."""
    return [
        f"{n['node_id']}  admitted"
        if n["admitted"]
        else f"{n['node_id']}  refused: " + "; ".join(n["reasons"])
        for n in doc["nodes"]
    ]


def error_of(data: bytes, header: str | None) -> str | None:
    """The service's ``{"error": ...}`` reply (header or body), or None for an answer."""
    try:
        body: Any = json.loads(data)
    except ValueError:
        return header
    if isinstance(body, dict) and "error" in body and "type" not in body:
        return str(body["error"])
    return header


def _node(raw: Any) -> dict[str, Any]:
    node_id, admitted, reasons = raw["node_id"], raw["admitted"], raw.get("reasons", [])
    if not (
        isinstance(node_id, str)
        and isinstance(admitted, bool)
        and isinstance(reasons, list)
        and all(isinstance(r, str) for r in reasons)
    ):
        raise TypeError(f"node entry {raw!r:.80}")
    return {"node_id": node_id, "admitted": admitted, "reasons": reasons}


def _for_the_full_path(name: str) -> bool:
    name = name.upper()
    if not name.startswith("LOCKSTEP_") or name in VARIABLES or name.startswith(OTHERS):
        return False
    if name.startswith(("LOCKSTEP_INVENTORY_", "LOCKSTEP_NATS_")):
        return True
    near = [v for v in VARIABLES if abs(len(v) - len(name)) <= 2]
    return bool(difflib.get_close_matches(name, near, n=1, cutoff=0.85))


def _path(value: str | None) -> Path | None:
    return None if value is None else Path(value)


def _plain_url(url: str) -> bool:
    # Only what the settings would accept unchanged: a scheme this client speaks, a host.
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return False
    return parts.scheme in SCHEMES and bool(parts.hostname) and (port is None or port > 0)
