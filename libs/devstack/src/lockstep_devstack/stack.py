"""The embedded stack: NATS and PostgreSQL together, or external ones given by URL."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from lockstep_common.bus_access import Permissions
from lockstep_common.identities import agent_identity
from lockstep_common.natsconn import NatsAccess
from lockstep_devstack import agents
from lockstep_devstack.nats import NatsServer
from lockstep_devstack.nats_cluster import STREAM_REPLICAS, NatsCluster
from lockstep_devstack.postgres import PostgresServer


@dataclass
class Stack:
    """Starts what is not given: ``nats_url`` / ``database_url`` set means "use that one".

    The embedded PostgreSQL's passwords live in ``data_dir/secrets/<identity>/pgpass``;
    ``database_url`` is then the admin's DSN, and each service gets its own role from
    :meth:`database_env`.

    Args:
        data_dir: state of the embedded servers (kept across restarts).
        nats_url: an external NATS to use instead of starting one.
        database_url: an external PostgreSQL to use instead of starting one.
        durable: fsync on (the demo); tests turn it off for speed.
        access: NATS identities and their grants (``bus_access.matrix``): the embedded NATS
            then requires TLS and a password per identity. None: an open NATS, for tests that
            are not about access.
    """

    data_dir: Path
    nats_url: str | None = None
    database_url: str | None = None
    durable: bool = True
    access: Mapping[str, Permissions] | None = None
    nats_cluster: int = 1
    nats: NatsServer | NatsCluster | None = field(default=None, init=False)
    postgres: PostgresServer | None = field(default=None, init=False)
    _provisioned: dict[str, str] = field(default_factory=dict, init=False, repr=False)

    def start(self) -> None:
        """Start the embedded servers that are needed; stop what started if one fails."""
        try:
            if self.database_url is None:
                self.postgres = PostgresServer(
                    self.data_dir / "postgres",
                    secrets_dir=self.data_dir / "secrets",
                    durable=self.durable,
                )
                self.postgres.start()
                self.database_url = self.postgres.dsn()
            if self.nats_url is None and self.nats_cluster > 1:
                self.nats = NatsCluster(
                    self.data_dir / "nats",
                    self.nats_cluster,
                    sync_always=self.durable,
                    access=self.access,
                    secrets_dir=self.data_dir,
                )
                self.nats.start()
                self.nats_url = self.nats.url
            elif self.nats_url is None:
                self.nats = NatsServer(
                    self.data_dir / "nats",
                    sync_always=self.durable,
                    access=self.access,
                    secrets_dir=self.data_dir,
                )
                self.nats.start()
                self.nats_url = self.nats.url
        except BaseException:
            self.stop()
            raise

    @property
    def stream_replicas(self) -> int:
        """How many replicas this stack's streams get: three on an embedded cluster, one on
        a single server (an external NATS: its operator's ``LOCKSTEP_STREAM_REPLICAS``)."""
        return STREAM_REPLICAS if isinstance(self.nats, NatsCluster) else 1

    def urls(self) -> tuple[str, str]:
        """(NATS URL, PostgreSQL DSN) of the running stack."""
        if self.nats_url is None or self.database_url is None:
            raise RuntimeError("the stack is not started")
        return self.nats_url, self.database_url

    def nats_client(self, identity: str) -> NatsAccess:
        """How ``identity`` connects to the stack's NATS. An external NATS: its URL only (the
        process's own ``LOCKSTEP_NATS_*`` variables say who it is there)."""
        if self.nats is not None:
            return self.nats.client(identity)
        nats_url, _ = self.urls()
        return NatsAccess.from_url(nats_url)

    def nats_env(self, identity: str) -> dict[str, str]:
        """The ``LOCKSTEP_NATS_*`` variables of a child process connecting as ``identity``."""
        return self.nats_client(identity).env()

    def enroll_agents(self, nodes: Mapping[str, str]) -> Callable[[str], NatsAccess]:
        """Enrol the node agents of ``nodes`` (node id -> site), one identity each, as
        ``lockstep agent enroll`` does, and have the running NATS reload its users. Returns
        how a node's agent connects (its own nkey seed)."""
        agents.enroll(self.data_dir, nodes)
        if self.nats is not None:
            self.nats.reload()
        return lambda node: self.nats_client(agent_identity(node))

    def database_env(self, identity: str) -> dict[str, str]:
        """The environment that connects ``identity`` (a service) to PostgreSQL: with the
        embedded server, its own role and schema (created on first use) and a URL naming its
        password file, never the password; with an external one, that server's URL."""
        if self.database_url is None:
            raise RuntimeError("the stack is not started")
        if self.postgres is None:
            return {"LOCKSTEP_DATABASE_URL": self.database_url}
        if identity not in self._provisioned:
            self._provisioned[identity] = self.postgres.provision(identity)
        return {"LOCKSTEP_DATABASE_URL": self._provisioned[identity]}

    def stop(self) -> None:
        """Stop the servers this stack started (never external ones)."""
        if self.nats is not None:
            self.nats.stop()
        if self.postgres is not None:
            self.postgres.stop()

    def __enter__(self) -> Stack:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()
