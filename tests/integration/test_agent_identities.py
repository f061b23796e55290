"""One NATS identity per node agent (issue 26, item 1), on a real nats-server configured as
``lockstep up`` configures it: a node's credential speaks for that node only, and a revoked
node is cut off at once while every other connection stays up."""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client as NatsClient

from lockstep_cli.catalog import bus_permissions
from lockstep_cli.polling import until
from lockstep_common import natsconn, subjects
from lockstep_common.identities import agent_identity
from lockstep_common.subjects import Namespace
from lockstep_devstack import Stack, agents
from lockstep_devstack.nats import reload_running
from lockstep_devstack.nats_cluster import NatsCluster
from tests.conftest import Servers

NS = Namespace("lockstep")
SITE = "s1"


@pytest.fixture
def stack(servers: Servers) -> Iterator[Stack]:
    data_dir = Path(tempfile.mkdtemp(prefix="lockstep-agents-"))
    agents.enroll(data_dir, {"n1": SITE, "n2": SITE, "n3": SITE})
    try:
        with Stack(
            data_dir, database_url=servers.database_url, durable=False, access=bus_permissions(NS)
        ) as st:
            yield st
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


class Watched:
    """A node agent's connection, with what the server told it."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.closed = False
        self.disconnects = 0
        self.nc: NatsClient | None = None

    async def on_closed(self) -> None:
        self.closed = True

    async def connect(self, stack: Stack, node: str) -> NatsClient:
        async def error(exc: Exception) -> None:
            self.errors.append(str(exc).removeprefix("nats: ").lower())

        async def closed() -> None:
            self.closed = True

        async def disconnected() -> None:
            self.disconnects += 1

        self.nc = await natsconn.connect(
            stack.nats_client(agent_identity(node)),
            name=f"agent-{node}",
            error_cb=error,
            closed_cb=closed,
            disconnected_cb=disconnected,
            allow_reconnect=False,
        )
        return self.nc


def refused(errors: list[str], subject: str) -> bool:
    return f'permissions violation for publish to "{subject}"' in errors


async def test_an_agent_publishing_for_another_node_is_refused_by_the_server(
    stack: Stack,
) -> None:
    a = Watched()
    nc = await a.connect(stack, "n1")
    own = NS.wire(subjects.health_observed(SITE, "n1"))
    others = [
        NS.wire(subjects.health_observed(SITE, "n2")),
        NS.wire(subjects.inventory_observed(SITE, "n2")),
        NS.wire(subjects.inventory_observed("s2", "n1")),  # its own id at another site
    ]
    try:
        for subject in [*others, own]:
            await nc.publish(subject, b"{}")
        await nc.flush()

        async def all_refused() -> bool:
            return all(refused(a.errors, s) for s in others)

        await until(all_refused, f"the server's refusals ({a.errors})", timeout_s=10)
    finally:
        await nc.close()
    assert not refused(a.errors, own)


async def test_a_revoked_node_cannot_connect_or_publish_and_the_others_stay_connected(
    stack: Stack,
) -> None:
    revoked, other = Watched(), Watched()
    await revoked.connect(stack, "n1")
    kept = await other.connect(stack, "n2")
    access = stack.nats_client(agent_identity("n1"))
    assert access.nkey_file is not None
    seed = access.nkey_file.read_text()
    agents.revoke(stack.data_dir, ["n1"])
    assert stack.nats is not None
    stack.nats.reload()

    async def cut_off() -> bool:
        return revoked.closed

    await until(cut_off, "the revoked node's connection closed by the server", timeout_s=10)
    assert access.nkey_file is not None
    assert not access.nkey_file.exists()  # its seed is gone from the stack's secrets too
    # The seed as the node holds it (installed before the revocation): refused.
    installed = stack.data_dir / "installed.nk"
    installed.write_text(seed)
    installed.chmod(0o600)
    with pytest.raises(nats.errors.Error, match="Authorization Violation"):
        await natsconn.connect(
            dataclasses.replace(access, nkey_file=installed),
            name="revoked",
            allow_reconnect=False,
            max_reconnect_attempts=0,
        )
    # The other node's connection was never dropped, and it still publishes its own subject.
    await kept.publish(NS.wire(subjects.health_observed(SITE, "n2")), b"{}")
    await kept.flush()
    assert (other.disconnects, other.closed, other.errors) == (0, False, [])
    await kept.close()


async def test_in_a_cluster_the_cli_path_revokes_a_node_on_every_member(tmp_path: Path) -> None:
    """``lockstep agent revoke`` reloads every running member of ``--nats-cluster``: the node
    is cut off where it was connected and refused by the others."""
    agents.enroll(tmp_path, {"n1": SITE, "n2": SITE})
    cluster = NatsCluster(tmp_path / "nats", 3, sync_always=False, access=bus_permissions(NS))
    cluster.start()
    try:
        access = cluster.client(agent_identity("n1"))
        assert access.nkey_file is not None
        installed = tmp_path / "installed.nk"
        installed.write_text(access.nkey_file.read_text())
        installed.chmod(0o600)
        on_second = dataclasses.replace(access, servers=(cluster.members[1].url,))
        revoked = Watched()
        revoked.nc = await natsconn.connect(
            on_second,
            name="n1",
            allow_reconnect=False,
            closed_cb=revoked.on_closed,
        )
        agents.revoke(tmp_path, ["n1"])
        assert reload_running(tmp_path) == 3

        async def cut_off() -> bool:
            return revoked.closed

        await until(cut_off, "n1's connection closed by the member it was on", timeout_s=10)
        for member in cluster.members:
            with pytest.raises(nats.errors.Error, match="Authorization Violation"):
                await natsconn.connect(
                    dataclasses.replace(access, servers=(member.url,), nkey_file=installed),
                    name="revoked",
                    allow_reconnect=False,
                    max_reconnect_attempts=0,
                )
        kept = await natsconn.connect(cluster.client(agent_identity("n2")), name="n2")
        await kept.close()
    finally:
        cluster.stop()
