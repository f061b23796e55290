"""The agents' health reports survive a NATS outage: a real nats-server of the test's own,
stopped while the agents report and started again on the same data directory. Every report
measured during the outage reaches the TELEMETRY stream once it is back, and none twice."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest

from lockstep_cli.polling import until
from lockstep_common.events import REGISTRY
from lockstep_common.events.v1 import HealthObserved, InventoryObserved
from lockstep_common.subjects import Namespace
from lockstep_common.topology import StreamPolicy, ensure_topology
from lockstep_devstack.nats import NatsServer
from lockstep_devstack.process import free_port
from lockstep_sim.agents.publisher import AgentFleet, FleetConfig
from tests.support import stored_telemetry

pytestmark = pytest.mark.integration
NODES = 3


@pytest.fixture
def server() -> Iterator[NatsServer]:
    base = Path(tempfile.mkdtemp(prefix="lockstep-agent-outage-"))
    # A port of its own, kept across the restart: not 4222, which another stack on the machine
    # may take while this server is down (the client would then reconnect to that one).
    own = NatsServer(base / "nats", port=free_port(), sync_always=False)
    own.start(timeout_s=30)
    try:
        yield own
    finally:
        own.stop()
        shutil.rmtree(base, ignore_errors=True)


async def test_reports_measured_while_nats_is_down_arrive_once_it_is_back(
    server: NatsServer,
) -> None:
    nc = await nats.connect(
        server.url, max_reconnect_attempts=-1, reconnect_time_wait=0.1, connect_timeout=2
    )
    try:
        js = nc.jetstream()
        ns = Namespace("outage")
        await ensure_topology(js, ns, StreamPolicy())
        # A cycle every 0.1 s; acks given up after 0.5 s; retries at most 0.4 s apart.
        config = FleetConfig(
            site="site-o",
            nodes=NODES,
            time_scale=100.0,
            ack_timeout_s=0.5,
            backoff_initial_s=0.05,
            backoff_max_s=0.4,
        )
        fleet = AgentFleet(js, ns, config)
        fleet.start()
        try:

            async def reported() -> bool:
                return fleet.stats.reports >= 2 * NODES

            await until(reported, what="reports before the outage")
            await asyncio.to_thread(server.stop)
            down_at = min(fleet.sequences.values())

            async def measured_while_down() -> bool:
                return (
                    min(fleet.sequences.values()) >= down_at + 10 and fleet.stats.failed_cycles > 0
                )

            await until(measured_while_down, what="10 cycles measured during the outage")
            assert fleet.buffered > 0
            await asyncio.to_thread(server.start, 30.0)

            async def drained() -> dict[str, int] | None:
                if fleet.buffered or fleet.stats.reports < sum(fleet.sequences.values()):
                    return None
                return dict(fleet.sequences)

            acked = await until(drained, what="the buffer drained after the outage", timeout_s=30)
        finally:
            await fleet.stop()
        assert fleet.stats.dropped == 0
        assert fleet.stats.retried > 0  # reports sent during the outage were sent again

        health: Counter[tuple[str, int]] = Counter()
        inventory: Counter[tuple[str, int]] = Counter()
        for _, body in await stored_telemetry(js, ns):
            data = REGISTRY.decode(body, max_bytes=1 << 20).data
            if isinstance(data, InventoryObserved):
                inventory[(data.node_id, data.sequence)] += 1
            else:
                assert isinstance(data, HealthObserved)
                assert data.heartbeat is not None
                health[(data.node_id, data.heartbeat)] += 1
        # Every cycle of every node, before, during and after the outage: stored exactly once
        # (the duplicate window dropped the retries of reports stored before their ack got lost).
        # (A cycle measured after the buffer drained may have been cut short by stop().)
        for node, last in acked.items():
            assert last > down_at + 10
            expected = {(node, seq) for seq in range(1, last + 1)}
            assert expected <= {k for k in inventory if k[0] == node}, node
            assert expected <= {k for k in health if k[0] == node}, node
        assert set(inventory.values()) == {1}
        assert set(health.values()) == {1}
    finally:
        await nc.close()
