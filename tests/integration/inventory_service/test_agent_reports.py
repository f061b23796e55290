"""Agent reports over real JetStream: GSP mismatch and CUDA/driver drift, idempotent replays,
stale reports ignored, pins and waves re-judging nodes, admission request/reply."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from typing import Any

import pytest

from lockstep_cli.polling import until
from lockstep_common import subjects
from lockstep_common.envelope import make_envelope
from lockstep_common.events import REGISTRY
from lockstep_common.events.v1 import (
    AdmissionCheckAnswered,
    AdmissionCheckRequested,
    InventoryObserved,
    WaveCompleted,
    WavePlanned,
)
from lockstep_common.vocabulary import Component, ObservationSource

from .conftest import SITE, Harness

pytestmark = pytest.mark.integration
DRIVER = "580.95.05"
IN_BAND = {
    Component.DRIVER: DRIVER,
    Component.CUDA: "13.0",
    Component.NCCL: "2.27.7",
    Component.KERNEL: "6.8.0-87-generic",
    Component.GPU_GSP: DRIVER,
    Component.FABRIC_MANAGER: DRIVER,
}
T0 = dt.datetime(2026, 11, 21, 12, tzinfo=dt.UTC)


def report(node: str, sequence: int, **change: Any) -> InventoryObserved:
    values: dict[str, Any] = {
        "node_id": node,
        "site": SITE,
        "source": ObservationSource.AGENT,
        "observed_at": T0 + dt.timedelta(seconds=sequence),
        "sequence": sequence,
        "components": dict(IN_BAND),
        "members": {"driver_branch": "R580"},
        "firmware_dirs": (DRIVER,),
        "loaded_module_version": DRIVER,
    }
    values.update(change)
    return InventoryObserved(**values)


async def send(h: Harness, data: InventoryObserved, event_id: uuid.UUID | None = None) -> None:
    await h.publish(subjects.inventory_observed(SITE, data.node_id), data, event_id=event_id)


async def applied_sequence(h: Harness, node: str) -> int | None:
    value = await h.app.require().pool.fetchval(
        "SELECT sequence FROM observations WHERE node_id = $1 AND source = 'agent'", node
    )
    return None if value is None else int(value)


async def pinned(h: Harness) -> str:
    return await h.pin({"gb200": {**h.golden(), **IN_BAND}})


async def test_gsp_mismatch_then_fixed_emits_detected_then_resolved(harness: Harness) -> None:
    await pinned(harness)
    await harness.sweep()
    node = harness.nodes[2].id
    await send(harness, report(node, 1))
    await until(lambda: _is(applied_sequence(harness, node), 1), what="first report")
    assert await harness.drift_events() == []

    # Seed 004: the 595 module loaded, but the GSP firmware dir for it is missing.
    await send(harness, report(node, 2, loaded_module_version="595.58.03"))
    await until(lambda: _count(harness, 1), what="drift.detected")
    kind, data = (await harness.drift_events())[0]
    assert kind == "drift.detected" and data["node_id"] == node
    kinds = {(i["component"], i["kind"]) for i in data["items"]}
    assert ("gpu_gsp", "gsp_mismatch") in kinds
    evidence = " ".join(i["detail"] for i in data["items"])
    assert "595.58.03" in evidence and "/lib/firmware/nvidia/595.58.03" in evidence

    await send(harness, report(node, 3))
    await until(lambda: _count(harness, 2), what="drift.resolved")
    assert (await harness.drift_events())[1][0] == "drift.resolved"


async def test_duplicates_and_out_of_order_reports_change_nothing(harness: Harness) -> None:
    await pinned(harness)
    await harness.sweep()
    node = harness.nodes[0].id
    old = "570.172.08"  # a hand downgrade of the driver under a CUDA 13 image
    newer = report(
        node,
        5,
        components={
            **IN_BAND,
            Component.DRIVER: old,
            Component.GPU_GSP: old,
            Component.FABRIC_MANAGER: old,
        },
        firmware_dirs=(old,),
        loaded_module_version=old,
    )
    event_id = uuid.uuid4()
    await send(harness, newer, event_id)
    await until(lambda: _count(harness, 1), what="CUDA/driver drift detected")
    kinds = {(i["component"], i["kind"]) for i in (await harness.drift_events())[0][1]["items"]}
    assert ("driver", "incompatible") in kinds  # CUDA 13.x needs driver >= 580
    # The same event again (a redelivery) and an older report arriving late: no effect.
    await send(harness, newer, event_id)
    await send(harness, report(node, 4))
    marker = report(harness.nodes[1].id, 1)  # a later message on the same stream
    await send(harness, marker)
    await until(lambda: _is(applied_sequence(harness, marker.node_id), 1), what="marker")
    assert await applied_sequence(harness, node) == 5
    assert len(await harness.drift_events()) == 1
    assert ("driver", "incompatible") in set(await harness.drift_of(node))


async def test_a_wave_turns_unexpected_into_pending_and_back(harness: Harness) -> None:
    await pinned(harness)
    node = harness.nodes[3].id
    harness.sim.bmc(node).node.components["HGX_FW_GPU_1"].version = "97.00.99.00.00"
    await harness.sweep()
    await send(harness, report(node, 1))
    await until(lambda: _is(applied_sequence(harness, node), 1), what="agent report")
    assert ("gpu_vbios", "unexpected") in set(await harness.drift_of(node))

    planned = WavePlanned(
        rollout_id="r1",
        wave=0,
        node_ids=(node,),
        components=(Component.GPU_VBIOS,),
        max_unavailable=1,
        failure_budget=0,
        soak_seconds=0,
    )
    await harness.publish(subjects.wave_planned("r1"), planned)
    await until(lambda: _has(harness, node, ("gpu_vbios", "pending")), what="pending")
    await harness.publish(
        subjects.wave_completed("r1"),
        WaveCompleted(rollout_id="r1", wave=0, succeeded=(), failed=(node,)),
    )
    await until(lambda: _has(harness, node, ("gpu_vbios", "unexpected")), what="unexpected")

    # The same wave.planned again (a retry arriving after the wave ended) changes nothing.
    await harness.publish(subjects.wave_planned("r1"), planned)
    await until(lambda: _settled(harness, "ROLLOUTS", "inventory-waves"), what="retry acked")
    waves = await harness.app.require().pool.fetchval("SELECT count(*) FROM wave_nodes")
    assert waves == 0 and ("gpu_vbios", "unexpected") in set(await harness.drift_of(node))


async def test_admission_check_answers_per_node_with_reasons(harness: Harness) -> None:
    stack_hash = await pinned(harness)
    harness.sim.bmc(harness.nodes[1].id).node.components["FW_BMC_0"].version = "old"
    await harness.sweep()
    for node in harness.nodes[:3]:
        await send(harness, report(node.id, 1, observed_at=dt.datetime.now(dt.UTC)))
    await until(lambda: _all_applied(harness, 3), what="three agent reports")
    asked = (harness.nodes[0].id, harness.nodes[1].id, harness.nodes[3].id, "nope")
    answer = await _ask(harness, AdmissionCheckRequested(stack_hash=stack_hash, node_ids=asked))
    verdicts = {n.node_id: n for n in answer.nodes}
    assert [n.node_id for n in answer.nodes] == list(asked)
    assert verdicts[asked[0]].admitted and verdicts[asked[0]].reasons == ()
    assert not verdicts[asked[1]].admitted
    assert any("bmc" in r for r in verdicts[asked[1]].reasons)
    assert "no agent report yet" in verdicts[asked[2]].reasons
    assert verdicts["nope"].reasons == ("node is not registered",)

    unknown = await _ask(harness, AdmissionCheckRequested(stack_hash="0" * 64, node_ids=asked[:1]))
    assert "unknown to inventory" in unknown.nodes[0].reasons[0]

    reply = await harness.nc.request(harness.ns.wire(subjects.admission_check()), b"{}", timeout=5)
    assert "error" in json.loads(reply.data) and reply.headers and "Lockstep-Error" in reply.headers


async def _ask(h: Harness, request: AdmissionCheckRequested) -> AdmissionCheckAnswered:
    env = make_envelope(request, source="/test")
    reply = await h.nc.request(h.ns.wire(subjects.admission_check()), env.to_json(), timeout=5)
    answered = REGISTRY.decode(reply.data, max_bytes=1 << 20).data
    assert isinstance(answered, AdmissionCheckAnswered)
    return answered


async def _is(value: Any, expected: Any) -> bool:
    return bool(await value == expected)


async def _settled(h: Harness, stream: str, consumer: str) -> bool:
    info = await h.nc.jetstream().consumer_info(h.ns.stream(stream), h.ns.durable(consumer))
    return bool(info.num_pending == 0 and info.num_ack_pending == 0)


async def _all_applied(h: Harness, n: int) -> bool:
    count = await h.app.require().pool.fetchval(
        "SELECT count(*) FROM observations WHERE source = 'agent'"
    )
    return bool(count == n)


async def _count(h: Harness, n: int) -> bool:
    return len(await h.drift_events()) >= n


async def _has(h: Harness, node: str, item: tuple[str, str]) -> bool:
    return item in set(await h.drift_of(node))


async def dead_letters(h: Harness) -> list[tuple[str, str]]:
    rows = await h.app.require().pool.fetch(
        "SELECT subject, reason FROM dead_letters ORDER BY stream_seq"
    )
    return [(r["subject"], r["reason"]) for r in rows]


async def test_reports_that_speak_for_someone_else_are_dead_lettered(harness: Harness) -> None:
    """Issue 26: one agent credential made any node drifted with a "redfish" report, and spoke
    for other nodes. The subject is what the server checked; the payload must agree with it."""
    await pinned(harness)
    await harness.sweep()
    victim, other = harness.nodes[0].id, harness.nodes[1].id
    before = await harness.app.require().pool.fetchval(
        "SELECT sequence FROM observations WHERE node_id = $1 AND source = 'redfish'", victim
    )
    forged_bmc = report(
        victim,
        900_000,
        source=ObservationSource.REDFISH,
        components={Component.BMC: "0.0.1-evil"},
        members={"BMC_Fw": "0.0.1-evil"},
        firmware_dirs=(),
        loaded_module_version=None,
    )
    await send(harness, forged_bmc)
    # Another node's report, on the victim's subject.
    await harness.publish(subjects.inventory_observed(SITE, victim), report(other, 1))
    # The victim's own report, in an envelope that names the inventory as its sender.
    # ... and in one that names another node's agent.
    for source in ("/lockstep/inventory", f"/lockstep/agent-{other}"):
        env = make_envelope(report(victim, 1), source=source)
        await harness.nc.jetstream().publish(
            harness.ns.wire(subjects.inventory_observed(SITE, victim)),
            env.to_json(),
            headers={"Nats-Msg-Id": str(env.event_id)},
        )
    await until(lambda: _letters(harness, 4), what="four dead letters")
    wire = subjects.inventory_observed(SITE, victim)
    reasons = await dead_letters(harness)
    assert [subject for subject, _ in reasons] == [wire] * 4
    assert "only the inventory's own sweep reports what a BMC says" in reasons[0][1]
    assert f"its payload belongs on {subjects.inventory_observed(SITE, other)}" in reasons[1][1]
    for reason in (reasons[2][1], reasons[3][1]):
        assert f"but only /lockstep/agent-{victim} may publish it" in reason
    assert await applied_sequence(harness, victim) is None
    assert await applied_sequence(harness, other) is None
    after = await harness.app.require().pool.fetchval(
        "SELECT sequence FROM observations WHERE node_id = $1 AND source = 'redfish'", victim
    )
    assert after == before
    assert await harness.drift_events() == [] and await harness.drift_of(victim) == []


async def _letters(h: Harness, n: int) -> bool:
    return len(await dead_letters(h)) >= n
