"""``lockstep fleet sweep|status|show|drift`` over the running service and its simulator."""

from __future__ import annotations

import asyncio
import json

import pytest

from lockstep_cli.polling import until
from lockstep_common.vocabulary import Component
from lockstep_inventory.adapters import registry, sweeps
from tests.speed import scaled

from .conftest import SITE, Harness, cli, cli_json

pytestmark = pytest.mark.integration


async def test_sweep_prints_every_node_and_an_unreadable_one_with_its_reason(
    env: None, harness: Harness
) -> None:
    dead = harness.nodes[0].model_copy(update={"id": "dead-1", "bmc_url": "http://127.71.9.9:9"})
    async with harness.app.require().pool.acquire() as conn:
        await registry.import_nodes(conn, [dead])
    code, out = await cli("fleet", "sweep", "--json")
    assert code == 1, out  # an unreadable BMC: not a clean sweep
    doc = json.loads(out)
    by_id = {n["id"]: n for n in doc["nodes"]}
    assert sorted(by_id) == sorted([*(n.id for n in harness.nodes), "dead-1"])
    assert by_id["dead-1"]["readable"] is False and by_id["dead-1"]["error"]
    assert by_id["dead-1"]["components"] == {} and doc["sweep"]["unreadable"] == 1
    golden = {str(c): v for c, v in harness.golden().items()}
    for n in harness.nodes:
        assert by_id[n.id]["readable"] is True and by_id[n.id]["error"] is None
        assert by_id[n.id]["components"] == golden
        assert len(by_id[n.id]["members"]) >= len(golden)

    code, out = await cli("fleet", "sweep", "--node", "dead-1")
    assert code == 1 and "dead-1" in out and "UNREADABLE" in out and "1 unreadable" in out

    pool = harness.app.require().pool
    before = await pool.fetchval("SELECT count(*) FROM sweeps")
    code, out = await cli("fleet", "sweep", "--node", "nope-9")
    assert code == 2 and "not in the registry: nope-9" in out
    assert await pool.fetchval("SELECT count(*) FROM sweeps") == before


async def test_status_show_and_drift_reflect_a_drifted_node(env: None, harness: Harness) -> None:
    stack_hash = await harness.pin({"gb200": harness.golden()})
    node = harness.nodes[1].id
    harness.sim.bmc(node).node.components["FW_BMC_0"].version = "GB200Nvl-24.09-1"
    await cli_json("fleet", "sweep")

    status = await cli_json("fleet", "status")
    assert status["fleet"]["nodes"] == 4
    assert (status["fleet"]["drifted"], status["fleet"]["conforming"]) == (1, 3)
    assert status["drifted_by_kind"] == {"unexpected": 1}
    assert status["sweep"]["finished_at"] is not None and status["sweep"]["done"] == 4
    code, out = await cli("fleet", "status")
    assert code == 0 and "75.0%" in out and "unexpected 1" in out

    shown = await cli_json("fleet", "show", node)
    assert shown["node"]["credentials"] == "env:LOCKSTEP_TESTBMC"
    assert shown["pin_stack_hash"] == stack_hash
    redfish = shown["observations"]["redfish"]
    assert redfish["readable"] is True and redfish["members"]["FW_BMC_0"] == "GB200Nvl-24.09-1"
    assert "bmc" in redfish["conflicts"]
    assert [(i["component"], i["kind"]) for i in shown["drift"]["items"]] == [("bmc", "unexpected")]
    assert any(h["item"] == "FW_BMC_0" for h in shown["history"])
    code, out = await cli("fleet", "show", node)
    assert code == 0 and stack_hash in out and "conflict: FW_BMC_0=GB200Nvl-24.09-1" in out
    assert "recent history" in out
    code, out = await cli("fleet", "show", "nope-9")
    assert code == 2 and "no node nope-9 in the registry" in out

    report = await cli_json("fleet", "drift")
    assert [e["node"] for e in report] == [node]
    good = harness.golden()[Component.BMC]
    item = report[0]["items"][0]
    assert (item["component"], item["kind"], item["expected"], item["actual"]) == (
        "bmc",
        "unexpected",
        good,
        f"GB200Nvl-24.09-1|{good}",
    )
    assert report[0]["site"] == SITE and report[0]["stack_hash"] == stack_hash
    code, out = await cli("fleet", "drift")
    assert code == 0 and node in out and f"nats sub '{harness.ns.name}.drift.>'" in out


async def test_status_watch_follows_a_running_sweep_and_ignores_an_abandoned_one(
    env: None, harness: Harness
) -> None:
    pool = harness.app.require().pool
    async with pool.acquire() as conn:
        stale = await sweeps.start(conn, 4, "dead sweeper")  # no one holds the lock
    status = await cli_json("fleet", "status", "--watch")
    assert status["sweep"]["id"] == stale.id and status["sweep"]["finished_at"] is None
    assert status["sweep_running"] is False  # a dead sweeper's row is not shown as running

    async with pool.acquire() as conn:
        await conn.execute(f"SELECT pg_advisory_lock({sweeps.SWEEP_LOCK_KEY})")
        try:
            running = await sweeps.start(conn, 4, "test")
            watch = asyncio.create_task(cli_json("fleet", "status", "--watch"))

            async def polling() -> bool:
                # The watcher has seen the lock held (its last query names pg_locks).
                return bool(
                    await conn.fetchval(
                        "SELECT count(*) FROM pg_stat_activity WHERE pid <> pg_backend_pid()"
                        " AND query LIKE '%FROM pg_locks WHERE locktype%'"
                        " AND query NOT LIKE '%pg_stat_activity%'"
                    )
                )

            await until(polling, what="status --watch polling the running sweep")
            await sweeps.progress(conn, running.id, 2, 0, 0)
            assert not watch.done()
            await sweeps.finish(conn, running.id)
        finally:
            await conn.execute(f"SELECT pg_advisory_unlock({sweeps.SWEEP_LOCK_KEY})")
    # A hang guard, not a bound: the watcher polls every second, but it is a subprocess on a
    # machine that may be shared (failed at 20 s under a load of 12-15 on two cores).
    status = await asyncio.wait_for(watch, scaled(60))
    assert status["sweep"]["id"] == running.id and status["sweep"]["finished_at"] is not None
