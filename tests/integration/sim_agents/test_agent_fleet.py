"""AgentFleet against a real nats-server: delivery, subjects, sequences, dedup, stop, backoff."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import nats
import pytest
from nats.aio.client import Client

from lockstep_cli.polling import until
from lockstep_common import subjects
from lockstep_common.envelope import MSG_ID_HEADER, make_envelope
from lockstep_common.events import REGISTRY
from lockstep_common.events.v1 import HealthObserved, InventoryObserved
from lockstep_common.subjects import Namespace
from lockstep_common.topology import StreamPolicy, ensure_topology
from lockstep_sim.agents.publisher import AgentFleet, FleetConfig
from lockstep_sim.agents.reports import agent_source, inventory_event
from lockstep_sim.agents.software import NodeSoftware
from tests.support import stored_telemetry

pytestmark = pytest.mark.integration
SITE = "site-x"


@pytest.fixture
async def nc(servers: object) -> AsyncIterator[Client]:
    client = await nats.connect(servers.nats_url)  # type: ignore[attr-defined]
    yield client
    await client.close()


async def test_every_node_reports_once_per_cycle(nc: Client, namespace: str) -> None:
    js = nc.jetstream()
    ns = Namespace(namespace)
    await ensure_topology(js, ns, StreamPolicy())
    fleet = AgentFleet(js, ns, FleetConfig(site=SITE, nodes=5, seed=1))
    cycles = 3
    for _ in range(cycles):
        assert await fleet.publish_cycle()
    assert fleet.stats.cycles == cycles
    assert fleet.stats.reports == 5 * cycles
    msgs = await stored_telemetry(js, ns)
    assert len(msgs) == 2 * 5 * cycles
    seqs: dict[str, list[int]] = defaultdict(list)
    health: dict[str, int] = defaultdict(int)
    for subject, body in msgs:
        env = REGISTRY.decode(body, max_bytes=1 << 20)
        data = env.data
        if isinstance(data, InventoryObserved):
            assert subject == ns.wire(subjects.inventory_observed(SITE, data.node_id))
            assert data.source == "agent"
            assert data.loaded_module_version in data.firmware_dirs
            seqs[data.node_id].append(data.sequence)
        else:
            assert isinstance(data, HealthObserved)
            assert subject == ns.wire(subjects.health_observed(SITE, data.node_id))
            health[data.node_id] += 1
        assert data.site == SITE
        assert env.subject == data.node_id
    assert set(seqs) == set(fleet.nodes) == set(health)
    for node_id, node_seqs in seqs.items():
        assert node_seqs == [1, 2, 3], node_id
        assert health[node_id] == cycles


async def test_duplicate_event_id_is_dropped(nc: Client, namespace: str) -> None:
    js = nc.jetstream()
    ns = Namespace(namespace)
    await ensure_topology(js, ns, StreamPolicy())
    node = NodeSoftware("n1")
    env = make_envelope(
        inventory_event("n1", SITE, node.state, 1, datetime.now(UTC)), source=agent_source("n1")
    )
    subject = ns.wire(subjects.inventory_observed(SITE, "n1"))
    headers = {MSG_ID_HEADER: str(env.event_id)}
    first = await (await js.publish_async(subject, env.to_json(), headers=headers))
    again = await (await js.publish_async(subject, env.to_json(), headers=headers))
    assert not first.duplicate
    assert again.duplicate
    assert len(await stored_telemetry(js, ns)) == 1


async def test_background_loop_keeps_cadence_and_stops_promptly(nc: Client, namespace: str) -> None:
    js = nc.jetstream()
    ns = Namespace(namespace)
    await ensure_topology(js, ns, StreamPolicy())
    # 10 s simulated cadence at 100x: a cycle every 0.1 s.
    fleet = AgentFleet(js, ns, FleetConfig(site=SITE, nodes=20, time_scale=100.0))
    fleet.start()
    try:

        async def three_cycles() -> bool:
            return fleet.stats.cycles >= 3

        await until(three_cycles, timeout_s=10, what="three report cycles")
    finally:
        started = time.monotonic()
        await fleet.stop()
        stopped_in = time.monotonic() - started
    assert stopped_in < 1.0
    assert fleet.stats.errors == 0
    sequences = set(fleet.sequences.values())
    # Every node has reported in every cycle, the last one possibly cut short by stop().
    assert min(sequences) >= 3 and max(sequences) - min(sequences) <= 1


async def test_backs_off_when_nats_refuses(nc: Client, namespace: str) -> None:
    js = nc.jetstream()
    ns = Namespace(namespace)  # no streams: every publish gets "no responders"
    config = FleetConfig(
        site=SITE, nodes=3, time_scale=1000.0, backoff_initial_s=0.1, backoff_max_s=0.4
    )
    fleet = AgentFleet(js, ns, config)
    started = time.monotonic()
    fleet.start()
    try:

        async def four_failures() -> bool:
            return fleet.stats.failed_cycles >= 4

        await until(four_failures, timeout_s=10, what="four failed cycles")
        elapsed = time.monotonic() - started
    finally:
        await fleet.stop()
    # Pauses after failures 1..3 are at least 0.05 + 0.1 + 0.2 s (jitter halves at most).
    assert elapsed >= 0.35
    assert fleet.stats.cycles == 0
    assert fleet.stats.errors >= 4 * 2 * 3  # every refused publish is counted


async def test_stop_without_start_and_twice(nc: Client, namespace: str) -> None:
    fleet = AgentFleet(nc.jetstream(), Namespace(namespace), FleetConfig(nodes=1))
    await fleet.stop()
    fleet.start()
    await fleet.stop()
    await fleet.stop()


async def test_closed_connection_fails_the_cycle_without_raising(
    servers: object, namespace: str
) -> None:
    client = await nats.connect(servers.nats_url)  # type: ignore[attr-defined]
    js = client.jetstream()
    await ensure_topology(js, Namespace(namespace), StreamPolicy())
    await client.close()
    fleet = AgentFleet(js, Namespace(namespace), FleetConfig(nodes=50))
    assert not await fleet.publish_cycle()
    assert fleet.stats.failed_cycles == 1
    assert fleet.stats.errors == 1  # the cycle stopped at the first refused publish


async def test_gsp_mismatch_reaches_the_wire(nc: Client, namespace: str) -> None:
    js = nc.jetstream()
    ns = Namespace(namespace)
    await ensure_topology(js, ns, StreamPolicy())
    node = NodeSoftware("gpu-7", driver_version="570.172.08")
    node.faults.missing_firmware_dir = True
    fleet = AgentFleet(js, ns, FleetConfig(site=SITE), nodes=[node])
    node.install_driver("580.65.06")
    node.reboot()
    assert await fleet.publish_cycle()
    decoded = [
        REGISTRY.decode(body, max_bytes=1 << 20).data for _, body in await stored_telemetry(js, ns)
    ]
    inv = next(d for d in decoded if isinstance(d, InventoryObserved))
    health = next(d for d in decoded if isinstance(d, HealthObserved))
    assert inv.loaded_module_version == "580.65.06"
    assert inv.firmware_dirs == ("570.172.08",)
    assert health.dcgm_passed is False
    assert health.xid_counts == {"79": 1}
