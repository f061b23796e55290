"""What a node's whole update costs the updater in PostgreSQL round trips (issue 28 item 3, "pay
per node, not per step"): every statement, BEGIN, COMMIT and pool reset the executor sends while
it updates a wave on the simulator over the service's own store, counted by asyncpg's query
logger on each of the pool's connections. A figure that does not move with the machine's load,
unlike the benchmark's CPU seconds: a change that adds a round trip to every step fails here."""

from __future__ import annotations

import asyncio
import dataclasses
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from lockstep_common import db
from lockstep_common.envelope import source_of
from lockstep_common.vocabulary import Component
from lockstep_sim.options import SimOptions
from lockstep_sim.runtime import FleetRuntime
from lockstep_updater.adapters.repository import PostgresStore
from lockstep_updater.domain.steps import TERMINAL, NodeStep
from lockstep_updater.testing.sim_fleet import SimFacts, sim_executor
from tests.integration.sim.pldm_fixtures import GB200_GPU, NEW_GPU_VERSION, package_for
from tests.integration.statements import Sent
from tests.integration.updater.conftest import ENV, FAST, STACK, attest_image
from tests.integration.updater.schema import migrated
from tests.integration.updater.test_executor_sim import plan_and_release

pytestmark = pytest.mark.integration
NODES = 4
CONNECTIONS = 3
# Ready steps follow at once: only the rare wait on the simulator's clock costs an idle claim.
QUICK = dataclasses.replace(FAST, retry_s=0.05, drain_poll_s=0.05)
MOST_PER_NODE = 88
"""Five over what was measured, for the odd extra wait a slow machine gives a node (a BMC not
back yet is a step committed again: about five round trips). Measured: 135.8 before issue 28
item 3; 115.8 without pool resets; 92.8 with a step's move and history, the guard's facts and
the claim each in one statement; 82.8 with the claim and the one-statement reads sent without
BEGIN and COMMIT (``PooledStore.statement``)."""


@dataclasses.dataclass
class PgWorld:
    rt: FleetRuntime
    store: PostgresStore
    facts: SimFacts
    bundle: Path
    sent: Sent
    pool: asyncpg.Pool


@pytest.fixture
async def pg_world(servers: Any, namespace: str, tmp_path: Path) -> AsyncIterator[PgWorld]:
    schema = await migrated(servers.database_url, namespace)
    pool = await db.create_pool(
        servers.database_url,
        schema,
        min_size=CONNECTIONS,
        max_size=CONNECTIONS,
        application_name="round-trips",
    )
    sent = Sent()
    held = [await pool.acquire() for _ in range(CONNECTIONS)]
    for c in held:
        c.add_query_logger(sent)
    for c in held:
        await pool.release(c)
    bundle = tmp_path / "bundle"
    image = package_for(GB200_GPU, NEW_GPU_VERSION)
    gpu = attest_image(bundle, "gpu.fwpkg", image, Component.GPU_VBIOS, NEW_GPU_VERSION)
    rt = FleetRuntime(
        SimOptions(NODES, "gb200", time_scale=0.002, host_base="127.74.0.1", port=0),
        scheduler_port=0,
    )
    await rt.start()
    store = PostgresStore(pool, source_of("updater"))
    async with store.transaction() as tx:
        await tx.record_bundle(STACK, str(bundle), (gpu,))
    try:
        yield PgWorld(rt, store, SimFacts(rt, credentials="SIMBMC"), bundle, sent, pool)
    finally:
        await rt.stop()
        await pool.close()


async def test_a_wave_costs_each_node_a_bounded_number_of_round_trips(pg_world: PgWorld) -> None:
    w = pg_world
    nodes = tuple(n.id for n in w.rt.fleet[:NODES])
    await plan_and_release(w, nodes, max_unavailable=NODES)  # type: ignore[arg-type]
    await w.sent.taken()
    ex = sim_executor(w.rt, w.store, w.facts, w.bundle, QUICK, ENV)
    spent: list[str] = []
    try:
        async with asyncio.timeout(120):  # a hang guard: the loop ends on the condition below
            while True:
                async with w.pool.acquire() as conn:
                    states = {r["state"] for r in await conn.fetch("SELECT state FROM node_work")}
                await w.sent.taken()  # the test's own question is not the updater's cost
                if states <= {s.value for s in TERMINAL}:
                    break
                worked = await ex.step()
                taken = await w.sent.taken()
                if worked:  # an idle claim's cost depends on the pace, not on the work
                    spent += taken
    finally:
        await ex.close()
    async with w.pool.acquire() as conn:
        states = {r["state"] for r in await conn.fetch("SELECT state FROM node_work")}
    assert states == {NodeStep.DONE.value}
    per_node = len(spent) / NODES
    kinds = Counter(q.split(None, 1)[0].rstrip(";").upper() for q in spent)
    print(f"round trips per node: {per_node:.1f}; by first word: {dict(kinds)}")
    assert per_node <= MOST_PER_NODE
