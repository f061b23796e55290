"""A sweep that dies halfway, two sweepers at once, malformed telemetry, gauges after a sweep."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import urllib.request
from collections.abc import AsyncGenerator, Sequence
from typing import Any

import asyncpg
import pytest

from lockstep_cli.polling import until
from lockstep_common import subjects
from lockstep_common.compatibility.files import packaged_rules
from lockstep_common.envelope import make_envelope
from lockstep_common.events.v1 import DriftDetected, InventoryObserved, PinChanged, ScopeSelector
from lockstep_common.provenance import source_for
from lockstep_common.testing import RecordedEvents
from lockstep_common.vocabulary import Component, ObservationSource
from lockstep_inventory import ingest
from lockstep_inventory.adapters.pg_store import PgInventoryStore
from lockstep_inventory.adapters.sweeper import SweepResult
from lockstep_inventory.domain.observation import Observation
from lockstep_inventory.ingest import apply_reports
from lockstep_inventory.sweeping import SweepBusyError
from lockstep_redfish.session import BmcTarget

from .conftest import SITE, Harness

pytestmark = pytest.mark.integration
RULES = packaged_rules()


async def test_a_sweep_cut_short_commits_whole_chunks_and_the_next_one_recovers(
    harness: Harness,
) -> None:
    await harness.pin({"gb200": harness.golden()})
    gate = asyncio.Event()

    async def two_then_crash(targets: Sequence[BmcTarget]) -> AsyncGenerator[SweepResult, None]:
        for t in targets[:2]:
            yield SweepResult(t.node_id, readable=False, error="simulated")
        gate.set()
        raise ConnectionError("sweeper process died")

    with pytest.raises(ConnectionError):
        await harness.sweep(results_of=two_then_crash)
    pool = harness.app.require().pool
    row = await pool.fetchrow("SELECT done, finished_at, error FROM sweeps ORDER BY id LIMIT 1")
    assert row is not None and row["done"] == 2  # sweep_chunk=2: the first chunk committed
    assert row["finished_at"] is not None and "sweeper process died" in row["error"]
    assert await pool.fetchval("SELECT count(*) FROM observations") == 2

    summary = await harness.sweep()  # the lock was released; state is consistent
    assert summary.unreadable == 0 and summary.outcome.applied == 4
    assert await pool.fetchval("SELECT bool_and(readable) FROM observations") is True


async def test_one_sweeper_at_a_time(harness: Harness) -> None:
    release = asyncio.Event()
    started = asyncio.Event()

    async def slow(targets: Sequence[BmcTarget]) -> AsyncGenerator[SweepResult, None]:
        started.set()
        await release.wait()
        for t in targets:
            yield SweepResult(t.node_id, readable=False, error="slow")

    first = asyncio.create_task(harness.sweep(results_of=slow))
    await started.wait()
    with pytest.raises(SweepBusyError):
        await harness.sweep(wait=False)
    release.set()
    await first
    assert (await harness.sweep()).unreadable == 0


async def test_malformed_telemetry_is_dead_lettered_and_good_reports_still_apply(
    harness: Harness,
) -> None:
    js = harness.nc.jetstream()
    node = harness.nodes[0].id
    good = InventoryObserved(
        node_id=node,
        site=SITE,
        source=ObservationSource.AGENT,
        observed_at=dt.datetime.now(dt.UTC),
        sequence=1,
        components={Component.DRIVER: "580.65.06"},
    )
    bad = json.loads(make_envelope(good, source=source_for(good)).to_json())
    bad["data"]["sequence"] = -1
    subject = harness.ns.wire(subjects.inventory_observed(SITE, node))
    await js.publish(subject, json.dumps(bad).encode())
    await harness.publish(subjects.inventory_observed(SITE, node), good)
    pool = harness.app.require().pool

    async def applied() -> bool:
        return bool(await pool.fetchval("SELECT count(*) FROM observations"))

    await until(applied, what="the good report applied")
    reason = await pool.fetchval("SELECT reason FROM dead_letters")
    assert "sequence" in reason  # names the bad field
    assert await pool.fetchval("SELECT sequence FROM observations") == 1


async def test_gauges_reflect_the_fleet_after_a_sweep(harness: Harness) -> None:
    await harness.pin({"gb200": harness.golden()})
    harness.sim.bmc(harness.nodes[0].id).node.components["FW_BMC_0"].version = "x"
    await harness.sweep()
    port = harness.app.require().http_port

    async def metrics() -> str:
        def get() -> str:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                return str(r.read().decode())

        return await asyncio.to_thread(get)

    async def refreshed() -> bool:
        return "lockstep_inventory_fleet_conformance_ratio 0.75" in await metrics()

    await until(refreshed, what="gauges refreshed")
    text = await metrics()
    assert 'lockstep_inventory_drifted_nodes{kind="unexpected"} 1.0' in text
    assert "lockstep_inventory_unreadable_bmcs 0.0" in text
    assert "lockstep_inventory_sweep_duration_seconds" in text


async def test_a_pin_whose_hash_does_not_name_its_stack_is_refused(harness: Harness) -> None:
    stack = {"gb200": harness.golden()}
    await harness.publish(
        subjects.pin_changed(SITE),
        PinChanged(site=SITE, scope=ScopeSelector(), stack_hash="f" * 64, stack=stack),
    )
    pool = harness.app.require().pool

    async def dead_lettered() -> bool:
        return bool(await pool.fetchval("SELECT count(*) FROM dead_letters"))

    await until(dead_lettered, what="the bad pin dead-lettered")
    assert "is not the hash of its stack" in await pool.fetchval("SELECT reason FROM dead_letters")
    assert await pool.fetchval("SELECT count(*) FROM pins") == 0
    await harness.pin(stack)  # a correct pin still applies


async def test_a_branch_reaching_end_of_life_is_found_without_a_version_change(
    harness: Harness,
) -> None:
    # R570 reaches end of life on 2026-02-28 (rules table): a node that keeps reporting the
    # same R570 tuple is re-judged on the first report of a later day and drifts.
    node = harness.nodes[0].id
    r570 = "570.172.08"
    before, after = dt.datetime(2026, 2, 27, tzinfo=dt.UTC), dt.datetime(2026, 3, 1, tzinfo=dt.UTC)

    def report(sequence: int, at: dt.datetime) -> Observation:
        return Observation(
            ObservationSource.AGENT,
            sequence,
            at,
            components={Component.DRIVER: r570, Component.CUDA: "12.8"},
            loaded_module=r570,
            firmware_dirs=(r570,),
        )

    collect = RecordedEvents()
    async with harness.app.require().pool.acquire() as conn, conn.transaction():
        store = PgInventoryStore(conn)
        await apply_reports(store, [(node, report(1, before))], collect, now=before, rules=RULES)
        assert collect.events == []  # no pin: everything unknown (not announced), no rule broken
        await apply_reports(store, [(node, report(2, after))], collect, now=after, rules=RULES)
    [event] = collect.events
    assert isinstance(event, DriftDetected)
    assert any("end of life" in i.detail for i in event.items)


async def test_a_chunk_aborted_by_a_deadlock_is_applied_again_not_the_sweep_lost(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """PostgreSQL breaks a deadlock by aborting one side (SQLSTATE 40P01): a sweep chunk that
    lost one is applied again (seen in the chaos test while agents' reports locked some of the
    chunk's nodes); once, and its progress counted once."""
    real = ingest.apply_reports
    aborted: list[int] = []

    async def loses_one_deadlock(*args: Any, **kwargs: Any) -> Any:
        if not aborted:
            aborted.append(1)
            await real(*args, **kwargs)  # written, then rolled back with the transaction
            raise asyncpg.DeadlockDetectedError("deadlock detected")
        return await real(*args, **kwargs)

    monkeypatch.setattr(ingest, "apply_reports", loses_one_deadlock)
    summary = await harness.sweep()
    assert aborted and summary.outcome.applied == len(harness.nodes)
    pool = harness.app.require().pool
    row = await pool.fetchrow("SELECT done, finished_at, error FROM sweeps ORDER BY id LIMIT 1")
    assert row is not None and row["done"] == len(harness.nodes) and row["error"] is None
    assert await pool.fetchval("SELECT count(*) FROM observations") == len(harness.nodes)
    assert "deadlock detected; run again (2 of 4)" in caplog.text


async def test_a_chunk_that_keeps_losing_deadlocks_fails_the_sweep_with_the_reason(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def always(*args: Any, **kwargs: Any) -> Any:
        raise asyncpg.DeadlockDetectedError("deadlock detected")

    monkeypatch.setattr(ingest, "apply_reports", always)
    with pytest.raises(asyncpg.DeadlockDetectedError):
        await harness.sweep()
    pool = harness.app.require().pool
    row = await pool.fetchrow("SELECT done, error FROM sweeps ORDER BY id LIMIT 1")
    assert row is not None and row["done"] == 0 and "deadlock detected" in row["error"]
