"""Where a running ``lockstep up`` is: a state file in its data directory, for other commands.

``lockstep up`` writes ``<data-dir>/stack.json`` (its pid, the NATS and PostgreSQL URLs, the NATS
identities, each service's metrics URL) once everything is ready and removes it when it stops.
``lockstep env`` turns it into the ``LOCKSTEP_*`` variables one identity needs; secrets stay in
their files, and only the files' paths are printed.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shlex
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lockstep_cli.cli_io import fail
from lockstep_common.identities import ADMIN, AGENT, CLI, NODE_PLACEHOLDER, agent_node
from lockstep_common.natsconn import NatsAccess

STATE_FILE = "stack.json"
DEFAULT_DATA_DIR = Path(".data")
OPERATORS = (CLI, ADMIN)
# The variables that name the servers: when one is set, the user chose that server.
NATS_URL = "LOCKSTEP_NATS_URL"
DATABASE_URL = "LOCKSTEP_DATABASE_URL"


@dataclass(frozen=True, slots=True)
class StackState:
    """What another command needs to reach a running stack."""

    pid: int
    nats_url: str
    database_url: str
    identities: tuple[str, ...]
    secure: bool
    metrics: Mapping[str, str] = field(default_factory=dict)
    """Each service process (as ``up`` labels it) -> its Prometheus metrics URL."""


def save(data_dir: Path, state: StackState) -> Path:
    """Write the state file atomically (readable by its owner only)."""
    path = data_dir / STATE_FILE
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(asdict(state), out, indent=2)
    tmp.replace(path)
    return path


def remove(data_dir: Path) -> None:
    """Forget the state file (the stack stopped), if it is ours."""
    if running_pid(data_dir) is None:
        (data_dir / STATE_FILE).unlink(missing_ok=True)


@contextlib.contextmanager
def exclusive(data_dir: Path) -> Iterator[None]:
    """Hold ``<data-dir>/.lock`` while a stack runs there: a second ``lockstep up`` on the same
    directory, even one started at the same instant, stops with one line instead of starting
    servers over the first one's files. The kernel drops the lock when the process ends."""
    data_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(data_dir / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            other = running_pid(data_dir)
            who = f" (lockstep up, pid {other})" if other else ""
            fail(f"a stack is already running on {data_dir}{who}; stop it first")
        yield
    finally:
        os.close(fd)


def load(data_dir: Path) -> StackState:
    """The running stack's state, or one line saying there is none."""
    path = data_dir / STATE_FILE
    try:
        raw = json.loads(path.read_text())
        state = StackState(
            pid=int(raw["pid"]),
            nats_url=str(raw["nats_url"]),
            database_url=str(raw["database_url"]),
            identities=tuple(str(i) for i in raw["identities"]),
            secure=bool(raw["secure"]),
            metrics={str(k): str(v) for k, v in raw.get("metrics", {}).items()},
        )
    except FileNotFoundError:
        fail(
            f"no running stack under {data_dir}: start one with `lockstep up --data-dir {data_dir}`"
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        fail(f"{path} is not a Lockstep state file ({exc})")
    if not _alive(state.pid):
        fail(f"the stack under {data_dir} is not running (pid {state.pid} is gone)")
    return state


def running_pid(data_dir: Path) -> int | None:
    """The pid of a ``lockstep up`` still running on ``data_dir``, if any."""
    try:
        pid = int(json.loads((data_dir / STATE_FILE).read_text())["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return pid if pid != os.getpid() and _alive(pid) else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def nats_access(data_dir: Path, state: StackState, identity: str) -> NatsAccess:
    """How ``identity`` reaches the stack's NATS."""
    if not state.secure:
        return NatsAccess.from_url(state.nats_url)
    # Imported here, and the modules without the servers' code: a Slurm prolog's `fleet
    # admit` reads the state file and starts fast.
    from lockstep_devstack import credentials
    from lockstep_devstack.layout import ca_file

    node = agent_node(identity)
    if node is not None and AGENT in state.identities and node != NODE_PLACEHOLDER:
        # A node agent: its own seed, as `lockstep agent enroll` wrote it.
        from lockstep_devstack import agents

        seed = agents.seed_path(agents.seed_dir(data_dir), node)
        if not seed.exists():
            fail(f"node {node!r} is not enrolled: `lockstep agent enroll {node}` first")
        try:
            return NatsAccess(
                tuple(u.strip() for u in state.nats_url.split(",")),
                identity,
                None,
                ca_file(data_dir / "nats"),
                nkey_file=seed,
            )
        except ValueError as exc:
            fail(str(exc))
    if identity not in state.identities or identity == AGENT:
        choices = [i for i in state.identities if i != AGENT] + [AGENT]
        fail(f"no NATS identity {identity!r}; choose from {', '.join(choices)}")

    return NatsAccess.from_url(
        state.nats_url,
        identity,
        credentials.path_of(data_dir, identity, "nats-password"),
        ca_file(data_dir / "nats"),
    )


def exports(data_dir: Path, identity: str) -> str:
    """Shell ``export`` lines giving a command ``identity``'s access to the running stack."""
    state = load(data_dir)
    env = nats_access(data_dir, state, identity).env()
    if identity == ADMIN:
        # The database administrator's DSN (it names its password file), for the admin's own
        # work: migrations and topology. Operator commands ask the services over the bus, so
        # `cli` and `reader` get no DSN (issue 26: no operator tool holds the database admin).
        env["LOCKSTEP_DATABASE_URL"] = state.database_url
    return "\n".join(f"export {k}={shlex.quote(v)}" for k, v in env.items())


def connection_defaults(
    data_dir: Path, identity: str, environ: Mapping[str, str]
) -> tuple[dict[str, Any], str]:
    """Settings keywords that reach the stack ``lockstep up`` runs under ``data_dir`` as
    ``identity``, for what ``environ`` leaves unset, and where the servers came from.

    A server named in the environment wins (NATS with its user, password and CA files
    together); the state file fills in only what is missing. Neither: one line saying how to
    start a stack, rather than a default port that may be another PostgreSQL on the machine.
    """
    has_nats, has_db = NATS_URL in environ, DATABASE_URL in environ
    if has_nats and has_db:
        return {}, "the environment"
    if not (data_dir / STATE_FILE).exists() and (has_nats or has_db):
        return {}, "the environment"  # one server named: the other's default, as before
    if not (data_dir / STATE_FILE).exists():
        fail(
            f"no {NATS_URL} / {DATABASE_URL} set and no stack running under {data_dir}: start "
            f"one with `lockstep up --data-dir {data_dir}`, or point at one with "
            f'`eval "$(lockstep env --data-dir DIR)"`'
        )
    state = load(data_dir)
    out: dict[str, Any] = {}
    if not has_nats:
        access = nats_access(data_dir, state, identity)
        out["nats_url"] = ",".join(access.servers)
        out["nats_user"] = access.user
        out["nats_password_file"] = access.password_file
        out["nats_ca_file"] = access.ca_file
    if not has_db and identity == ADMIN:
        out["database_url"] = state.database_url
    where = f"{data_dir / STATE_FILE} (lockstep up, pid {state.pid}) as {identity}"
    return out, where if not (has_nats or has_db) else f"{where} and the environment"
