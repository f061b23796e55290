"""``lockstep fleet sweep`` asks the inventory to sweep (real NATS + PostgreSQL, the simulator's
BMCs): the inventory's sweep worker reads them with the inventory's credentials and replies
with each node's outcome; any unreadable BMC is a non-zero exit."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import asyncpg
import pytest

from lockstep_cli.polling import until
from lockstep_common import subjects
from lockstep_common.envelope import EventData, make_envelope
from lockstep_common.events import REGISTRY
from lockstep_common.events.v1 import FleetSweepAnswered, FleetSweepRequested, OpsRefused
from lockstep_common.identities import CLI, READER
from lockstep_inventory.adapters import registry, sweeps

from .conftest import Harness, cli, harness

__all__ = ["harness"]

pytestmark = pytest.mark.integration


async def sweeps_by(h: Harness) -> list[str]:
    rows = await h.app.require().pool.fetch("SELECT by FROM sweeps ORDER BY id")
    return [r["by"] for r in rows]


async def test_the_inventory_sweeps_on_demand_and_answers_each_nodes_outcome(
    env: None, harness: Harness
) -> None:
    node = harness.nodes[1].id
    harness.sim.bmc(node).node.components["FW_BMC_0"].version = "GB200Nvl-24.09-1"
    code, out = await cli("fleet", "sweep", "--json")
    assert code == 0, out
    doc = json.loads(out)
    assert doc["sweep"]["total"] == 4 and doc["sweep"]["unreadable"] == 0
    by_id = {n["id"]: n for n in doc["nodes"]}
    assert sorted(by_id) == sorted(n.id for n in harness.nodes)
    assert all(n["readable"] and n["error"] is None for n in by_id.values())
    # Members that disagree show as the version set a pin would name.
    assert "|" in by_id[node]["components"]["bmc"]
    assert "GB200Nvl-24.09-1" in by_id[node]["components"]["bmc"]
    # The inventory's own sweep, recorded with the identity that asked.
    assert await sweeps_by(harness) == [CLI]
    audit = await harness.app.require().pool.fetch(
        "SELECT identity, outcome FROM operator_requests WHERE command = 'fleet.sweep'"
    )
    assert [(r["identity"], r["outcome"]) for r in audit] == [(CLI, "done")]
    code, out = await cli("fleet", "sweep", "--node", node)
    assert code == 0 and "sweep 2: 1 node(s)" in out and "0 unreadable" in out


async def test_a_sweep_with_every_bmc_unreadable_exits_non_zero(
    env: None, harness: Harness
) -> None:
    """Issue 31: 48 of 48 unreadable, and ``fleet sweep`` exited 0."""
    nowhere = [n.model_copy(update={"credentials": "env:LOCKSTEP_NOBODY"}) for n in harness.nodes]
    async with harness.app.require().pool.acquire() as conn:
        await registry.import_nodes(conn, nowhere)
    code, out = await cli("fleet", "sweep", "--json")
    assert code == 1, out
    doc = json.loads(out)
    assert doc["sweep"]["unreadable"] == 4
    assert all(not n["readable"] and "LOCKSTEP_NOBODY" in n["error"] for n in doc["nodes"])
    code, out = await cli("fleet", "sweep")
    assert code == 1 and "4 unreadable" in out and "UNREADABLE" in out


async def test_the_reader_may_not_sweep(harness: Harness) -> None:
    subject = harness.ns.wire(subjects.ops_request(READER, "inventory", "fleet.sweep"))
    env = make_envelope(FleetSweepRequested(), source="/t")
    reply = await harness.nc.request(subject, env.to_json(), timeout=10)
    refused = REGISTRY.decode(reply.data, max_bytes=1 << 20).data
    assert isinstance(refused, OpsRefused) and refused.kind == "forbidden"
    assert await sweeps_by(harness) == []


async def test_a_second_sweep_asked_meanwhile_is_refused_not_queued(
    harness: Harness, servers: Any
) -> None:
    """Each request waiting would hold one of the inventory's connections; the first one asked
    waits for the sweep already running (here: the lock a test holds), the next is refused."""

    async def sweep(identity: str = CLI) -> EventData:
        subject = harness.ns.wire(subjects.ops_request(identity, "inventory", "fleet.sweep"))
        env = make_envelope(FleetSweepRequested(), source="/t")
        reply = await harness.nc.request(subject, env.to_json(), timeout=60)
        return REGISTRY.decode(reply.data, max_bytes=1 << 20).data

    holder = await asyncpg.connect(servers.database_url)
    try:
        # The sweep lock's key is the inventory schema's (adapters/sweeps.py).
        await holder.execute(f'SET search_path TO "{harness.settings.db_schema}"')
        await holder.execute(f"SELECT pg_advisory_lock({sweeps.SWEEP_LOCK_KEY})")
        first = asyncio.ensure_future(sweep())

        async def first_waits() -> bool:
            return bool(
                await holder.fetchval(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                )
            )

        await until(first_waits, what="the first sweep waiting for the running one")
        second = await sweep()
        assert isinstance(second, OpsRefused) and second.kind == "conflict", second
        assert "a sweep cli asked for is running" in second.reason
        await holder.execute(f"SELECT pg_advisory_unlock({sweeps.SWEEP_LOCK_KEY})")
        done = await first
        assert isinstance(done, FleetSweepAnswered) and done.sweep is not None
        assert done.sweep.total == 4
    finally:
        await holder.close()
