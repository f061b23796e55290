"""Issue 26's attacks on a running rollout, replayed on the whole stack (real NATS + PostgreSQL,
the five services, the simulated fleet and its agents):

- a health report with XID 79 for a canary node, published on another node's subject, during a
  healthy rollout: dead-lettered, no gate changes, the rollout completes;
- an inventory report that says it was read from a BMC (``source: redfish``), with a large
  sequence, for a node outside the canary: dead-lettered, the node is not made drifted, and
  the sweep after it is applied;
- an outbox row written first under the id the healthgate's verdict used to have (uuid5 of
  rollout and wave) while a bad image degrades the canary: the genuine ``gate.tripped`` still
  goes out, the rollout halts, and no BMC outside the canary sees a mutating call.

What stays out of reach here is item 1 of the issue (one NATS identity per node, so that the
server refuses agent A's publish on node B's subject): the tests connect with the test servers'
open credentials, so they exercise the consumers' checks, which hold whatever identity spoke."""

from __future__ import annotations

import datetime as dt
import random
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from lockstep_cli.polling import until
from lockstep_common import subjects
from lockstep_common.envelope import EventData, make_envelope
from lockstep_common.events.v1 import GatePassed, InventoryObserved
from lockstep_common.vocabulary import Component, GateVerdict, ObservationSource
from lockstep_healthgate.testing.reports import Fault, report
from lockstep_inventory.adapters import state
from lockstep_sim.agents.reports import agent_source
from lockstep_sim.faults import Fault as SimFault
from lockstep_sim.faults import FaultPlan
from tests.integration.rollout_stack import NODES, Stack, running_stack

pytestmark = pytest.mark.integration


@pytest.fixture
async def stack(
    servers: Any, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Stack]:
    async with running_stack(servers, namespace, tmp_path, monkeypatch) as running:
        yield running


async def publish_as(stack: Stack, subject: str, data: EventData, source: str) -> None:
    """What a holder of a node agent's credential can publish: anything on a report subject."""
    env = make_envelope(data, source=source)
    await stack.nc.jetstream().publish(
        stack.ns.wire(subject), env.to_json(), headers={"Nats-Msg-Id": str(env.event_id)}
    )


async def dead_letters(stack: Stack, service: str) -> list[str]:
    rows = await stack.apps[service].require().pool.fetch("SELECT reason FROM dead_letters")
    return [r["reason"] for r in rows]


async def test_forged_reports_change_no_gate_and_no_drift(stack: Stack) -> None:
    by_id = {n.id: n for n in stack.nodes}
    await stack.start_rollout()
    (canary,) = await stack.wait("planner", "wave.planned.")
    victim = canary["node_ids"][0]
    speaker = next(n for n in by_id if n not in canary["node_ids"])
    site = by_id[victim].site
    now = dt.datetime.now(dt.UTC)
    # XID 79 and a failed DCGM diag "from" a canary node, on another node's subject.
    fatal = report(
        victim,
        now,
        10_000,
        random.Random(1),
        site=site,
        fault=Fault(dcgm_failed=True, xids={"79": 1}),
    )
    await publish_as(stack, subjects.health_observed(site, speaker), fatal, agent_source(speaker))
    # A "redfish" report for a node outside the canary: an old BMC firmware, a large sequence.
    forged = InventoryObserved(
        node_id=speaker,
        site=by_id[speaker].site,
        source=ObservationSource.REDFISH,
        observed_at=now,
        sequence=900_000,
        components={Component.BMC: "0.0.1"},
        members={"BMC_Fw": "0.0.1"},
    )
    await publish_as(
        stack,
        subjects.inventory_observed(by_id[speaker].site, speaker),
        forged,
        agent_source(speaker),
    )

    async def refused() -> bool:
        gate = await dead_letters(stack, "healthgate")
        inventory = await dead_letters(stack, "inventory")
        return bool(gate) and bool(inventory)

    await until(refused, what="both forged reports dead-lettered", timeout_s=40)
    assert "its payload belongs on" in (await dead_letters(stack, "healthgate"))[0]
    assert "only the inventory's own sweep" in (await dead_letters(stack, "inventory"))[0]

    (done,) = await stack.wait("planner", "rollout.completed.")
    assert done["nodes_updated"] == NODES and done["nodes_failed"] == 0
    assert await stack.emitted("healthgate", "gate.tripped.") == []
    assert [p["wave"] for p in await stack.emitted("healthgate", "gate.passed.")] == [0, 1]
    await stack.sweep()  # a real sweep after the forged report is applied
    async with stack.apps["inventory"].require().pool.acquire() as conn:
        swept = await conn.fetchval(
            "SELECT sequence FROM observations WHERE node_id = $1 AND source = 'redfish'",
            speaker,
        )
        drift = await state.drift(conn, [speaker])
    assert swept < 900_000
    assert all(i.actual != "0.0.1" for i in drift[speaker].items)


async def test_a_verdict_id_taken_first_does_not_hide_the_trip_nor_release_a_wave(
    stack: Stack,
) -> None:
    stack.rt.simulator.set_faults(
        FaultPlan(faults=(SimFault("degrade_health", components=("gpu",)),))
    )
    await stack.start_rollout()
    (canary,) = await stack.wait("planner", "wave.planned.")
    rollout = canary["rollout_id"]
    # The id the gate's verdict had, computable by anyone who saw the rollout planned.
    predicted = uuid.uuid5(uuid.NAMESPACE_URL, f"lockstep:gate:{rollout}:0")
    squatter = make_envelope(
        GatePassed(rollout_id=rollout, wave=0, verdict=GateVerdict.PASSED, evidence=()),
        source="/lockstep/healthgate",
        event_id=predicted,
    )
    await (
        stack.apps["healthgate"]
        .require()
        .pool.execute(
            "INSERT INTO outbox (event_id, subject, payload, published_at)"
            " VALUES ($1, $2, $3, now())",
            predicted,
            subjects.gate(GateVerdict.PASSED, rollout),
            squatter.to_json(),
        )
    )
    (tripped,) = await stack.wait("healthgate", "gate.tripped.")
    assert tripped["wave"] == 0 and set(tripped["offending_nodes"]) <= set(canary["node_ids"])
    (halted,) = await stack.wait("planner", "rollout.halted.")
    assert halted["halted_by"] == "gate", halted
    assert [w["wave"] for w in await stack.emitted("planner", "wave.planned.")] == [0]
    outside = [n.id for n in stack.rt.fleet if n.id not in canary["node_ids"]]
    assert len(outside) == NODES - 5
    for node in outside:  # not one mutating BMC call, no drain
        calls = {e["action"] for e in stack.rt.simulator.bmc(node).ledger}
        assert calls <= {"session_create", "session_delete"}, (node, calls)
        assert [e for e in stack.rt.scheduler.ledger if e.node_id == node] == [], node
