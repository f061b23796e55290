"""Stragglers outside rollouts on both healthgate stores (issue 11, deliverable 6): medians of
the window per node, nodes of open waves left out, and a profile's stragglers announced once
per change (two healthgate processes take turns), then again when they recover."""

from __future__ import annotations

import asyncio
import json
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
from typer.testing import CliRunner

from lockstep_cli.main import app
from lockstep_common.envelope import source_of
from lockstep_common.events.v1 import FleetNode, ScopeSelector
from lockstep_common.service import ServiceApp
from lockstep_common.vocabulary import Component
from lockstep_healthgate.adapters import partitions
from lockstep_healthgate.adapters.pg_store import PgGateStore
from lockstep_healthgate.domain.waves import Member, Wave, WaveState
from lockstep_healthgate.operator_commands import COMMANDS
from lockstep_healthgate.settings import Settings as GateSettings
from lockstep_healthgate.store import GateStore, SampleRow
from lockstep_healthgate.straggler_watch import StragglerConfig, evaluate_once
from tests.integration.test_healthgate_store_contract import migrated_pool, store

pytestmark = pytest.mark.integration
__all__ = ["store"]
NOW = datetime.now(UTC).replace(microsecond=0)
CONFIG = StragglerConfig(interval_s=60, window_s=600, fleet_timeout_s=5)
NODES = 24
SLOW = {"n003", "n011"}
BAD_NIC = "28.39.1002"


class Fleet:
    """What the inventory answers ``fleet.query`` with."""

    def __init__(self) -> None:
        self.registered = [
            FleetNode.model_validate(
                {
                    "node_id": f"n{i:03d}",
                    "site": "ams1",
                    "profile": "gb200",
                    "bmc_url": f"https://bmc-{i}.example",
                    "credentials": "env:BMC",
                    "observed": {
                        Component.NIC: BAD_NIC if f"n{i:03d}" in SLOW else "28.42.1234",
                        Component.BMC: "24.12",
                    },
                },
                strict=False,
            )
            for i in range(NODES)
        ]

    async def nodes(self, scope: ScopeSelector | None) -> list[FleetNode]:
        return list(self.registered)


async def add_samples(store: GateStore, *, slow: set[str], start: datetime) -> None:
    rng = random.Random(6)
    rows = []
    for i in range(NODES):
        node = f"n{i:03d}"
        for k in range(12):  # a report every 10 s for two minutes
            at = start + timedelta(seconds=10 * k)
            busbw = rng.gauss(360 if node in slow else 400, 2)
            rows += [
                SampleRow(at, node, "nccl_busbw_gbps", busbw),
                SampleRow(at, node, "sm_clock_mhz", rng.gauss(1980, 4)),
            ]
    async with store.transaction() as tx:
        await tx.ensure_partitions({partitions.day_of(start), partitions.day_of(NOW)})
        await tx.add_samples(rows)


async def test_stragglers_are_announced_once_with_the_version_they_share_then_cleared(
    store: GateStore,
) -> None:
    fleet = Fleet()
    await add_samples(store, slow=SLOW, start=NOW - timedelta(minutes=5))
    [event] = await evaluate_once(store, fleet, CONFIG, now=NOW)
    assert event.profile == "gb200" and event.nodes == NODES
    assert {s.node_id for s in event.stragglers} == SLOW
    assert all(s.metric == "nccl_busbw_gbps" and s.peer_median > 395 for s in event.stragglers)
    [shared] = event.shared_versions
    assert (shared.component, shared.version, shared.stragglers_with) == (
        Component.NIC,
        BAD_NIC,
        2,
    )
    # The same stragglers next time: nothing to announce (a second process sees the record).
    assert await evaluate_once(store, fleet, CONFIG, now=NOW + timedelta(seconds=30)) == []

    # They recover (the window moves past the slow samples): the profile has none left.
    later = NOW + timedelta(minutes=20)
    await add_samples(store, slow=set(), start=later - timedelta(minutes=3))
    [cleared] = await evaluate_once(store, fleet, CONFIG, now=later)
    assert cleared.stragglers == () and cleared.shared_versions == ()


async def test_nodes_of_a_wave_being_updated_are_left_to_the_gate(store: GateStore) -> None:
    await add_samples(store, slow=SLOW, start=NOW - timedelta(minutes=5))
    wave = Wave(
        "r-1",
        0,
        WaveState.UPDATING,
        NOW - timedelta(hours=1),
        60,
        tuple(Member(n, "s", canary=True) for n in sorted(SLOW)),
    )
    async with store.transaction() as tx:
        await tx.add_wave(wave)
    assert await evaluate_once(store, Fleet(), CONFIG, now=NOW) == []  # no straggler, no news
    async with store.transaction() as tx:
        medians = await tx.node_medians(("nccl_busbw_gbps",), NOW - timedelta(minutes=10), NOW)
    assert set(medians) == {f"n{i:03d}" for i in range(NODES)} - SLOW


async def test_unregistered_nodes_and_too_few_peers_are_not_judged(
    servers: Any, namespace: str
) -> None:

    pool: asyncpg.Pool = await migrated_pool(servers, namespace)
    try:
        store = PgGateStore(pool, source_of("healthgate"))
        await add_samples(store, slow=SLOW, start=NOW - timedelta(minutes=5))
        fleet = Fleet()
        fleet.registered = fleet.registered[:9]  # the inventory knows 9 of the 24: too few to judge
        assert await evaluate_once(store, fleet, CONFIG, now=NOW) == []
        assert await pool.fetchval("SELECT count(*) FROM outbox") == 0
    finally:
        await pool.close()


async def test_fleet_stragglers_shows_them_and_the_shared_version(
    servers: Any, namespace: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """``lockstep fleet stragglers`` asks the healthgate (its operator commands, answered by a
    ServiceApp over the bus): the CLI has no database to reach."""
    monkeypatch.setenv("LOCKSTEP_DATA_DIR", str(tmp_path / "no-stack"))
    monkeypatch.setenv("LOCKSTEP_NATS_URL", servers.nats_url)
    monkeypatch.setenv("LOCKSTEP_NAMESPACE", namespace)
    monkeypatch.setenv("LOCKSTEP_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    service = ServiceApp(
        "healthgate",
        GateSettings(
            nats_url=servers.nats_url,
            database_url=servers.database_url,
            namespace=namespace,
            db_schema=f"{namespace}_healthgate",
            log_json=False,
        ),
        migration_package="lockstep_healthgate.migrations",
    )
    service.add_operator_commands(*COMMANDS)
    await service.start()
    try:
        code, out = await asyncio.to_thread(cli, "fleet", "stragglers")
        assert code == 0 and "no straggler evaluation yet" in out, out
        store = PgGateStore(service.require().pool, source_of("healthgate"))
        await add_samples(store, slow=SLOW, start=NOW - timedelta(minutes=5))
        await evaluate_once(store, Fleet(), CONFIG, now=NOW)
        code, out = await asyncio.to_thread(cli, "fleet", "stragglers")
        assert code == 1, out  # stragglers exist: a script can alert on it
        assert "gb200: 2 straggler(s) of 24" in out and all(n in out for n in SLOW)
        assert f"they share nic {BAD_NIC}: 2 of 2 stragglers, 0 of 22 healthy peers" in out
        code, out = await asyncio.to_thread(cli, "fleet", "stragglers", "--json")
        [finding] = json.loads(out)
        assert {s["node_id"] for s in finding["stragglers"]} == SLOW
    finally:
        await service.stop()


def cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output
