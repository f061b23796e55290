"""The updater's handlers on the in-memory store: what a plan, a wave, a halt and an
attested bundle leave behind, and what a wave outside the plan is refused with."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from lockstep_common.envelope import Envelope, EventData, make_envelope, source_of
from lockstep_common.events.v1 import (
    GateTripped,
    RolloutHalted,
    RolloutPlanned,
    WavePlan,
    WavePlanned,
)
from lockstep_common.vocabulary import ChangeClass, Component, GateVerdict
from lockstep_updater.domain.guard import Verdict, decide
from lockstep_updater.domain.remedy import RemedyPolicy
from lockstep_updater.domain.steps import NodeStep
from lockstep_updater.handlers import Handlers, PlanNotYetKnown
from lockstep_updater.testing.memory_store import MemoryStore

HANDLERS = Handlers(RemedyPolicy.AUTOMATIC)
NOW = datetime(2026, 3, 2, 12, tzinfo=UTC)  # handlers are given the time

pytestmark = pytest.mark.unit
PLANNER = source_of("planner")
STACK = "a" * 64
ROLLOUT = "r-1"


def env(data: EventData) -> Envelope[EventData]:
    return make_envelope(data, source=PLANNER, correlation_id="intent-1")


def plan(*waves: tuple[str, ...], dry_run: bool = False) -> RolloutPlanned:
    return RolloutPlanned(
        rollout_id=ROLLOUT,
        intent_id=uuid.uuid4(),
        stack_hash=STACK,
        change_class=ChangeClass.STANDARD,
        waves=tuple(WavePlan(number=i, node_ids=w) for i, w in enumerate(waves)),
        dry_run=dry_run,
    )


def wave(number: int, *nodes: str) -> WavePlanned:
    return WavePlanned(
        rollout_id=ROLLOUT,
        wave=number,
        node_ids=nodes,
        components=(Component.GPU_VBIOS,),
        max_unavailable=1,
        failure_budget=0,
        soak_seconds=0,
    )


async def deliver(store: MemoryStore, data: EventData) -> None:
    async with store.transaction() as tx:
        e = env(data)
        if isinstance(data, RolloutPlanned):
            await HANDLERS.rollout_planned(tx, e, now=NOW)  # type: ignore[arg-type]
        elif isinstance(data, WavePlanned):
            await HANDLERS.wave_planned(tx, e, now=NOW)  # type: ignore[arg-type]
        elif isinstance(data, RolloutHalted):
            await HANDLERS.rollout_halted(tx, e, now=NOW)  # type: ignore[arg-type]
        elif isinstance(data, GateTripped):
            await HANDLERS.gate_tripped(tx, e, now=NOW)  # type: ignore[arg-type]


async def test_a_wave_of_the_plan_becomes_one_pending_item_per_node_once() -> None:
    store = MemoryStore()
    await deliver(store, plan(("n1",), ("n2", "n3")))
    for _ in range(2):  # a redelivery adds nothing
        await deliver(store, wave(1, "n2", "n3"))
    assert [(i.node_id, i.wave, i.state, i.components) for i in store.items] == [
        ("n2", 1, NodeStep.PENDING, ("gpu_vbios",)),
        ("n3", 1, NodeStep.PENDING, ("gpu_vbios",)),
    ]
    assert store.events.emitted == []  # the executor reports, not the handler


async def test_a_wave_naming_a_node_outside_the_plan_is_refused_whole_and_halts() -> None:
    store = MemoryStore()
    await deliver(store, plan(("n1", "n2")))
    await deliver(store, wave(0, "n1", "intruder"))
    assert store.items == []  # nothing recorded: nothing will be touched
    (halted,) = store.events.events
    assert isinstance(halted, RolloutHalted)
    assert halted.halted_by == "updater"
    assert "1 node(s) outside the approved plan (intruder)" in halted.reason
    (subject, sent) = store.events.emitted[0]
    assert subject == f"rollout.halted.{ROLLOUT}" and sent.correlation_id == "intent-1"
    async with store.transaction() as tx:
        # Later work on the rollout is refused by the guard too: it is halted.
        await tx.record_wave(wave(1, "n2"), None)
    async with store.transaction() as tx:
        claim = await tx.claim(60)
        assert claim is not None
        facts = await tx.facts(claim, "p0")
    assert facts.halted is not None and "outside the approved plan" in facts.halted


async def test_a_wave_listing_nodes_of_a_later_approved_wave_is_refused_whole_and_halts() -> None:
    # reliability.md F3: a corrupted wave 0 naming 5x the approved canary's nodes.
    store = MemoryStore()
    later = tuple(f"n{i}" for i in range(2, 6))
    await deliver(store, plan(("n1",), later))
    await deliver(store, wave(0, "n1", *later))
    assert store.items == []
    (halted,) = store.events.events
    assert isinstance(halted, RolloutHalted)
    assert "4 node(s) the approved plan put in another wave (n2, n3, n4, n5)" in halted.reason
    # Had such a wave been recorded anyway (no halt), the executor's guard refuses at action time.
    store = MemoryStore()
    await deliver(store, plan(("n1",), later))
    async with store.transaction() as tx:
        await tx.record_wave(wave(0, "n1", "n2"), None)
    async with store.transaction() as tx:
        verdicts = []
        while (claim := await tx.claim(60)) is not None:
            verdicts.append(decide(await tx.facts(claim, "p0"), takes_out_of_service=False))
    assert [(d.verdict, d.reason) for d in verdicts] == [
        (Verdict.PROCEED, ""),
        (Verdict.REFUSE, "n2 is approved for wave 1, not wave 0"),
    ]


async def test_a_wave_before_its_plan_is_redelivered_later() -> None:
    store = MemoryStore()
    with pytest.raises(PlanNotYetKnown, match="wave 0 of r-1 before its rollout"):
        await deliver(store, wave(0, "n1"))
    assert store.items == []


async def test_a_dry_run_plan_is_not_an_approved_plan() -> None:
    store = MemoryStore()
    await deliver(store, plan(("n1",), dry_run=True))
    with pytest.raises(PlanNotYetKnown):
        await deliver(store, wave(0, "n1"))


@pytest.mark.parametrize(
    ("stop", "reason"),
    [
        (RolloutHalted(rollout_id=ROLLOUT, wave=0, reason="abort", halted_by="ops"), "ops: abort"),
        (
            GateTripped(rollout_id=ROLLOUT, wave=0, verdict=GateVerdict.TRIPPED, evidence=()),
            "gate tripped on wave 0",
        ),
    ],
)
async def test_a_halt_or_a_tripped_gate_stops_the_rollout(stop: EventData, reason: str) -> None:
    store = MemoryStore()
    await deliver(store, plan(("n1",)))
    await deliver(store, wave(0, "n1"))
    await deliver(store, stop)
    async with store.transaction() as tx:
        claim = await tx.claim(60)
        assert claim is not None
        facts = await tx.facts(claim, "p0")
    assert facts.halted == reason
