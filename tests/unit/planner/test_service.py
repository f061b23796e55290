"""The planner service's handlers and worker on the in-memory store: intents become rollouts
or refusals naming every reason, gates release, halt and pause, timers and operator commands
move rollouts, and every decision lands in the audit trail."""

from __future__ import annotations

import base64
import dataclasses
from datetime import datetime, timedelta
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from lockstep_common.compatibility.files import packaged_rules
from lockstep_common.envelope import EventData, make_envelope
from lockstep_common.events.v1 import (
    DriftItem,
    GateInconclusive,
    GatePassed,
    GateTripped,
    PinChanged,
    RolloutCompleted,
    RolloutHalted,
    RolloutPlanned,
    ScopeSelector,
    WaveCompleted,
    WavePlanned,
)
from lockstep_common.vocabulary import ChangeClass, Component, DriftKind, GateVerdict, Severity
from lockstep_planner.adapters.policy_file import packaged_policy
from lockstep_planner.domain.rollout import RolloutState, WaveState
from lockstep_planner.handlers import (
    VerdictBeforeCompletion,
    on_bundle_attested,
    on_gate,
    on_intent_submitted,
    on_wave_completed,
    rollout_id_of,
)
from lockstep_planner.lifecycle import Timing
from lockstep_planner.planning import Planning
from lockstep_planner.testing.kit import (
    NEW_DRIVER,
    OLD_DRIVER,
    attested,
    drifted,
    evidence,
    fleet_node,
    image,
    intent,
    sign,
)
from lockstep_planner.testing.memory_store import MemoryFleet, MemoryStore
from lockstep_planner.worker import PlannerWorker

pytestmark = pytest.mark.unit
TIMING = Timing(deadline_factor=3.0, deadline_min_s=3600.0)
ALICE, BOB = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
APPROVERS = {"alice": ALICE.public_key(), "bob": BOB.public_key()}


class StoreClock:
    """The worker's ``Clock`` reads the memory store's lease clock, which the tests move."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store

    def now(self) -> datetime:
        return self.store.now

    def monotonic(self) -> float:
        return self.store.now.timestamp()


def worker(store: MemoryStore) -> PlannerWorker:
    return PlannerWorker(
        Planning(packaged_policy(), 4, TIMING, APPROVERS, rules=packaged_rules()),
        store=lambda _: store,
        fleet=lambda _: MemoryFleet(()),
        poll_s=0.01,
        lease_s=60,
        max_attempts=3,
        clock=StoreClock(store),
    )


def env(data: EventData, **kwargs: Any) -> Any:
    return make_envelope(data, source="/test", **kwargs)


async def deliver(store: MemoryStore, handler: Any, data: EventData, **kwargs: Any) -> None:
    async with store.transaction() as tx:
        await handler(tx, env(data), now=store.now, **kwargs)


def emitted(store: MemoryStore, cls: type[EventData]) -> list[Any]:
    return [e for e in store.events.events if isinstance(e, cls)]


class Rig:
    """A store with an attested bundle, a fleet of 20 nodes and the worker."""

    def __init__(self, nodes: list[Any] | None = None) -> None:
        self.store = MemoryStore()
        self.bundle = attested()
        self.fleet = MemoryFleet(nodes if nodes is not None else [fleet_node(i) for i in range(20)])
        self.worker = worker(self.store)

    async def attest(self) -> None:
        await deliver(self.store, on_bundle_attested, self.bundle)

    async def submit(self, **kwargs: Any) -> str:
        data = intent(self.bundle, **kwargs)
        await deliver(self.store, on_intent_submitted, data)
        await self.worker.intent(self.store, self.fleet)
        return rollout_id_of(data.intent_id)

    async def gate(self, cls: type[Any], rollout_id: str, wave: int, passed: bool = True) -> None:
        verdict = {
            GatePassed: GateVerdict.PASSED,
            GateTripped: GateVerdict.TRIPPED,
            GateInconclusive: GateVerdict.INCONCLUSIVE,
        }[cls]
        data = cls(
            rollout_id=rollout_id,
            wave=wave,
            verdict=verdict,
            evidence=(evidence(passed=passed),),
            offending_nodes=("n001",) if not passed else (),
        )
        await deliver(self.store, on_gate, data, timing=TIMING)

    async def complete_wave(self, rollout_id: str, wave: int, failed: tuple[str, ...] = ()) -> None:
        nodes = self.wave(rollout_id, wave).node_ids
        data = WaveCompleted(
            rollout_id=rollout_id,
            wave=wave,
            succeeded=tuple(n for n in nodes if n not in failed),
            failed=failed,
        )
        await deliver(self.store, on_wave_completed, data, timing=TIMING)

    def wave(self, rollout_id: str, number: int) -> Any:
        return self.store.tables.waves[(rollout_id, number)]

    def state(self, rollout_id: str) -> RolloutState:
        return self.store.tables.rollouts[rollout_id].state

    def later(self, seconds: float) -> None:
        self.store.now += timedelta(seconds=seconds)


async def test_an_intent_becomes_a_rollout_and_its_canary_is_released_with_controls() -> None:
    rig = Rig()
    await rig.attest()
    rollout_id = await rig.submit()
    [planned] = emitted(rig.store, RolloutPlanned)
    assert planned.rollout_id == rollout_id and not planned.dry_run
    assert sorted(n for w in planned.waves for n in w.node_ids) == [f"n{i:03d}" for i in range(20)]
    [wave0] = emitted(rig.store, WavePlanned)
    # The bundle pins driver and GSP firmware; the updater is handed the driver, whose package
    # brings the GSP firmware and whose in-band unit verifies it.
    assert wave0.wave == 0 and wave0.components == (Component.DRIVER,)
    [stratum] = wave0.strata
    assert stratum.node_ids == wave0.node_ids and stratum.control_ids, "controls are published"
    assert not set(stratum.control_ids) & set(wave0.node_ids)
    assert rig.state(rollout_id) is RolloutState.RUNNING
    assert [a.action for a in rig.store.audit_of(rollout_id)] == [
        "intent submitted",
        "planned",
        "started",
        "wave released",
    ]


async def test_an_unattested_bundle_is_refused_and_nothing_is_planned() -> None:
    rig = Rig()
    rollout_id = await rig.submit()
    [halted] = emitted(rig.store, RolloutHalted)
    assert halted.rollout_id == rollout_id and halted.halted_by == "policy"
    assert "is not attested" in halted.reason
    assert not rig.store.tables.rollouts and not emitted(rig.store, WavePlanned)
    assert rig.store.audit_of(rollout_id)[-1].action == "refused"


async def test_a_refusal_names_every_reason_at_once() -> None:
    rig = Rig()
    rig.bundle = attested(
        image(Component.DRIVER, "580.10"), image(Component.CPLD, "2.0", banks="one_way")
    )
    await rig.attest()
    await rig.submit(
        change_class=ChangeClass.STANDARD, scope=ScopeSelector(pools=("no-such-pool",))
    )
    [halted] = emitted(rig.store, RolloutHalted)
    assert "does not allow one-way components (cpld)" in halted.reason
    assert "scope matches no node" in halted.reason


async def test_a_target_breaking_a_compatibility_rule_is_refused_naming_it() -> None:
    # The bundle moves the driver without its GSP firmware: GSP != driver on every node after.
    rig = Rig()
    rig.bundle = attested(image(Component.DRIVER, NEW_DRIVER))
    await rig.attest()
    rollout_id = await rig.submit()
    [halted] = emitted(rig.store, RolloutHalted)
    assert halted.rollout_id == rollout_id and halted.halted_by == "policy"
    assert "target stack breaks a compatibility rule on 20 gb200 node(s)" in halted.reason
    assert f"gpu_gsp {OLD_DRIVER} != driver {NEW_DRIVER}" in halted.reason
    assert not rig.store.tables.rollouts and not emitted(rig.store, WavePlanned)


async def test_a_gsp_mismatch_the_bundle_repairs_is_moved_one_it_does_not_stays_out() -> None:
    gsp = DriftItem(
        component=Component.GPU_GSP,
        expected=OLD_DRIVER,
        actual="570.26",
        kind=DriftKind.GSP_MISMATCH,
        severity=Severity.CRITICAL,
    )
    mismatched = {Component.DRIVER: OLD_DRIVER, Component.GPU_GSP: "570.26"}
    nodes = [fleet_node(i) for i in range(10)]
    nodes.append(fleet_node(10, observed=mismatched, drift=(gsp,)))
    rig = Rig(nodes)
    await rig.attest()  # driver and GSP move together: the mismatch is repaired
    await rig.submit(change_class=ChangeClass.ROUTINE)
    moving = {n for w in emitted(rig.store, RolloutPlanned)[0].waves for n in w.node_ids}
    assert "n010" in moving

    rig = Rig(nodes)
    rig.bundle = attested(image(Component.BMC, "2.0"))  # leaves the mismatch as it is
    await rig.attest()
    rollout_id = await rig.submit(change_class=ChangeClass.ROUTINE)
    plan = rig.store.tables.rollouts[rollout_id].plan
    assert {e["node"] for e in plan["excluded"]} == {"n010"}


async def test_drifted_and_unreadable_nodes_are_excluded_with_their_reasons() -> None:
    nodes = [fleet_node(i) for i in range(10)] + [drifted(10), fleet_node(11, readable=False)]
    rig = Rig(nodes)
    await rig.attest()
    rollout_id = await rig.submit()
    plan = rig.store.tables.rollouts[rollout_id].plan
    assert {e["node"]: e["reason"] for e in plan["excluded"]} == {
        "n010": "unexplained drift: explain or fix it first",
        "n011": "BMC unreadable: its actual versions are unknown",
    }
    moving = {n for w in emitted(rig.store, RolloutPlanned)[0].waves for n in w.node_ids}
    assert "n010" not in moving and "n011" not in moving


async def test_a_duplicate_intent_yields_one_rollout() -> None:
    rig = Rig()
    await rig.attest()
    data = intent(rig.bundle)
    for _ in range(3):  # redelivered as new events, e.g. the CLI retrying
        await deliver(rig.store, on_intent_submitted, data)
    while await rig.worker.intent(rig.store, rig.fleet):
        pass
    assert len(rig.store.tables.rollouts) == 1 and len(rig.store.tables.intents) == 1
    assert len(emitted(rig.store, RolloutPlanned)) == 1


async def test_a_second_rollout_may_not_claim_nodes_a_live_one_holds() -> None:
    rig = Rig()
    await rig.attest()
    first = await rig.submit()
    second = await rig.submit(scope=ScopeSelector(nodes=("n001", "n002")))
    assert rig.state(first) is RolloutState.RUNNING and second not in rig.store.tables.rollouts
    halted = emitted(rig.store, RolloutHalted)[-1]
    assert f"already held by live rollout(s) {first}" in halted.reason


async def test_gate_passed_after_the_soak_releases_the_next_wave() -> None:
    rig = Rig()
    await rig.attest()
    rollout_id = await rig.submit()
    await rig.complete_wave(rollout_id, 0)
    await rig.gate(GatePassed, rollout_id, 0)
    assert [w.wave for w in emitted(rig.store, WavePlanned)] == [0], "soak not over yet"
    assert not await rig.worker.timers(rig.store)
    rig.later(rig.wave(rollout_id, 0).soak_s)
    assert await rig.worker.timers(rig.store)
    assert [w.wave for w in emitted(rig.store, WavePlanned)] == [0, 1]
    assert rig.wave(rollout_id, 0).state is WaveState.PASSED


async def test_every_wave_has_a_control_even_the_one_that_moves_the_controls() -> None:
    """The healthgate never passes a stratum without a control; the wave that moves the chosen
    controls is compared with nodes earlier waves moved (found by the end-to-end rollout)."""
    rig = Rig([fleet_node(i) for i in range(40)])  # three waves after a canary of 5
    await rig.attest()
    rollout_id = await rig.submit()
    waves = sorted(
        (w for (r, _), w in rig.store.tables.waves.items() if r == rollout_id),
        key=lambda w: w.number,
    )
    assert len(waves) > 2
    earlier: set[str] = set()
    for wave in waves:
        for stratum in wave.strata:
            assert stratum.control_ids, f"wave {wave.number} has no control"
            assert not set(stratum.control_ids) & set(wave.node_ids)
        earlier |= set(wave.node_ids)
    [last] = waves[-1].strata
    assert set(waves[0].strata[0].control_ids) <= set(waves[-1].node_ids)  # controls move last
    assert set(last.control_ids) <= earlier - set(waves[-1].node_ids)


async def test_a_gate_passed_before_the_wave_completed_waits_for_completion_and_soak() -> None:
    rig = Rig()
    await rig.attest()
    rollout_id = await rig.submit()
    await rig.gate(GatePassed, rollout_id, 0)
    rig.later(600)
    await rig.worker.timers(rig.store)
    assert [w.wave for w in emitted(rig.store, WavePlanned)] == [0]
    await rig.complete_wave(rollout_id, 0)
    rig.later(rig.wave(rollout_id, 0).soak_s)
    await rig.worker.timers(rig.store)
    assert [w.wave for w in emitted(rig.store, WavePlanned)] == [0, 1]


async def test_gate_tripped_halts_at_once_with_the_evidence() -> None:
    rig = Rig()
    await rig.attest()
    rollout_id = await rig.submit()
    await rig.complete_wave(rollout_id, 0)
    await rig.gate(GateTripped, rollout_id, 0, passed=False)
    [halted] = emitted(rig.store, RolloutHalted)
    assert halted.halted_by == "gate" and halted.wave == 0
    assert "nccl_busbw_ratio" in halted.reason and "n001" in halted.reason
    assert rig.state(rollout_id) is RolloutState.HALTED
    assert rig.wave(rollout_id, 0).state is WaveState.TRIPPED
    assert rig.wave(rollout_id, 1).state is WaveState.CANCELLED
    await rig.gate(GatePassed, rollout_id, 0)  # a late pass changes nothing
    rig.later(86_400)
    await rig.worker.timers(rig.store)
    assert [w.wave for w in emitted(rig.store, WavePlanned)] == [0]


async def test_gate_inconclusive_pauses_until_a_human_resumes() -> None:
    rig = Rig()
    await rig.attest()
    rollout_id = await rig.submit()
    await rig.complete_wave(rollout_id, 0)
    await rig.gate(GateInconclusive, rollout_id, 0)
    assert rig.state(rollout_id) is RolloutState.PAUSED
    assert rig.wave(rollout_id, 0).state is WaveState.HELD
    rig.later(86_400)
    await rig.worker.timers(rig.store)
    assert [w.wave for w in emitted(rig.store, WavePlanned)] == [0]
    rig.store.command(rollout_id, "resume", by="bob", reason="checked the canary by hand")
    assert await rig.worker.commands(rig.store)
    assert rig.state(rollout_id) is RolloutState.RUNNING
    assert [w.wave for w in emitted(rig.store, WavePlanned)] == [0, 1]
    actions = [(a.actor, a.action) for a in rig.store.audit_of(rollout_id)]
    assert ("bob", "wave accepted") in actions and ("bob", "resumed") in actions


async def test_an_inconclusive_verdict_overtaking_the_wave_completion_waits_for_it() -> None:
    """Gate verdicts and wave.completed travel on different streams: an inconclusive verdict
    seen first is retried, so the wave is held (and resume accepts it) once its soak began."""
    rig = Rig()
    await rig.attest()
    rollout_id = await rig.submit()
    with pytest.raises(VerdictBeforeCompletion):
        await rig.gate(GateInconclusive, rollout_id, 0)
    assert rig.state(rollout_id) is RolloutState.RUNNING
    await rig.complete_wave(rollout_id, 0)
    await rig.gate(GateInconclusive, rollout_id, 0)  # the redelivery
    assert rig.state(rollout_id) is RolloutState.PAUSED
    assert rig.wave(rollout_id, 0).state is WaveState.HELD
    rig.store.command(rollout_id, "resume", by="bob", reason="checked the canary by hand")
    assert await rig.worker.commands(rig.store)
    assert [w.wave for w in emitted(rig.store, WavePlanned)] == [0, 1]


async def test_the_last_wave_passing_completes_the_rollout_and_moves_the_pin() -> None:
    rig = Rig()
    await rig.attest()
    rollout_id = await rig.submit()
    waves = len(emitted(rig.store, RolloutPlanned)[0].waves)
    for number in range(waves):
        await rig.complete_wave(rollout_id, number)
        rig.later(rig.wave(rollout_id, number).soak_s)
        await rig.gate(GatePassed, rollout_id, number)
    assert rig.state(rollout_id) is RolloutState.COMPLETED
    [done] = emitted(rig.store, RolloutCompleted)
    assert done.nodes_updated == 20 and done.nodes_failed == 0
    [pin] = emitted(rig.store, PinChanged)
    assert pin.rollout_id == rollout_id and pin.site == "site-a"
    assert pin.stack_hash == rig.bundle.stack_hash
    assert pin.stack == {"gb200": {"driver": "570.124.06", "gpu_gsp": "570.124.06"}}


async def test_a_wave_over_its_failure_budget_halts() -> None:
    rig = Rig()
    await rig.attest()
    rollout_id = await rig.submit()
    node = rig.wave(rollout_id, 0).node_ids[0]
    await rig.complete_wave(rollout_id, 0, failed=(node,))
    [halted] = emitted(rig.store, RolloutHalted)
    assert "over its failure budget of 0" in halted.reason and node in halted.reason


async def test_a_wave_without_progress_by_its_deadline_halts_the_rollout() -> None:
    rig = Rig()
    await rig.attest()
    rollout_id = await rig.submit()
    allowed = max(TIMING.deadline_min_s, TIMING.deadline_factor * rig.wave(rollout_id, 0).planned_s)
    rig.later(allowed - 1)
    await rig.worker.timers(rig.store)
    assert rig.state(rollout_id) is RolloutState.RUNNING
    rig.later(2)
    await rig.worker.timers(rig.store)
    [halted] = emitted(rig.store, RolloutHalted)
    assert "no progress within its deadline" in halted.reason and halted.halted_by == "policy"
    assert rig.wave(rollout_id, 0).state is WaveState.TIMED_OUT


async def test_pause_holds_the_next_wave_and_abort_stops_for_good() -> None:
    rig = Rig()
    await rig.attest()
    rollout_id = await rig.submit()
    rig.store.command(rollout_id, "pause")
    await rig.worker.commands(rig.store)
    await rig.complete_wave(rollout_id, 0)
    await rig.gate(GatePassed, rollout_id, 0)
    rig.later(86_400)
    await rig.worker.timers(rig.store)
    assert [w.wave for w in emitted(rig.store, WavePlanned)] == [0]
    rig.store.command(rollout_id, "abort", by="carol", reason="change freeze")
    rig.store.command(rollout_id, "resume", by="dave")
    await rig.worker.commands(rig.store)
    [halted] = emitted(rig.store, RolloutHalted)
    assert halted.halted_by == "carol" and "change freeze" in halted.reason
    assert rig.state(rollout_id) is RolloutState.ABORTED
    outcomes = [o for _, o in rig.store.tables.commands.values()]
    assert outcomes[1] == "done" and outcomes[2] is not None and "refused" in outcomes[2]


async def test_an_inventory_that_does_not_answer_leaves_the_intent_for_a_later_claim() -> None:
    rig = Rig()
    await rig.attest()
    rig.fleet.down = True
    data = intent(rig.bundle)
    await deliver(rig.store, on_intent_submitted, data)
    assert await rig.worker.intent(rig.store, rig.fleet)
    assert not await rig.worker.intent(rig.store, rig.fleet), "leased: not claimed again"
    rig.fleet.down = False
    rig.later(61)
    assert await rig.worker.intent(rig.store, rig.fleet)
    assert [p.intent_id for p in emitted(rig.store, RolloutPlanned)] == [data.intent_id]


async def test_a_dry_run_plans_and_releases_nothing() -> None:
    rig = Rig()
    await rig.attest()
    rollout_id = await rig.submit(dry_run=True)
    [planned] = emitted(rig.store, RolloutPlanned)
    assert planned.dry_run and not emitted(rig.store, WavePlanned)
    assert rig.store.tables.rollouts[rollout_id].plan["makespan_s"] > 0
    again = await rig.submit()  # the same nodes: a dry run holds none
    assert rig.state(again) is RolloutState.RUNNING


async def test_a_refused_dry_run_announces_no_halted_rollout() -> None:
    """A dry run whose scope selects nothing is refused in the audit trail and to whoever asked,
    but no consumer hears of a halted rollout (issue 31): nothing was started to halt."""
    rig = Rig()
    await rig.attest()
    rollout_id = await rig.submit(dry_run=True, scope=ScopeSelector(pools=("nowhere",)))
    assert not emitted(rig.store, RolloutHalted) and not emitted(rig.store, RolloutPlanned)
    [refused] = [a for a in rig.store.audit_of(rollout_id) if a.action == "refused"]
    assert "scope matches no node" in refused.detail


async def test_a_routine_change_starts_only_with_a_signed_approval_of_its_plan() -> None:
    rig = Rig()
    await rig.attest()
    rollout_id = await rig.submit(change_class=ChangeClass.ROUTINE, approval_ref="CHG-1042")
    assert rig.state(rollout_id) is RolloutState.PLANNED and not emitted(rig.store, WavePlanned)
    assert rig.store.audit_of(rollout_id)[-1].action == "awaiting approval"
    plan_hash = rig.store.tables.rollouts[rollout_id].plan_hash
    stranger = Ed25519PrivateKey.generate()
    attempts = [
        sign(stranger, "mallory", rollout_id, plan_hash),  # not in the trust store
        sign(stranger, "alice", rollout_id, plan_hash),  # forged: not alice's key
        sign(ALICE, "alice", rollout_id, "0" * 64),  # another plan
    ]
    for approval in attempts:
        rig.store.command(rollout_id, "approve", approval=approval)
    await rig.worker.commands(rig.store)
    outcomes = [o or "" for _, o in rig.store.tables.commands.values()]
    assert "not in the approvers trust store" in outcomes[0]
    assert "forged or corrupt" in outcomes[1]
    assert "a changed plan needs a new approval" in outcomes[2]
    assert rig.state(rollout_id) is RolloutState.PLANNED
    rig.store.command(rollout_id, "approve", approval=sign(ALICE, "alice", rollout_id, plan_hash))
    await rig.worker.commands(rig.store)
    assert rig.state(rollout_id) is RolloutState.RUNNING
    assert [w.wave for w in emitted(rig.store, WavePlanned)] == [0]
    assert ("alice", "approved") in [(a.actor, a.action) for a in rig.store.audit_of(rollout_id)]


async def test_power_fabric_needs_two_distinct_approvers_and_a_replay_counts_once() -> None:
    rig = Rig()
    rig.bundle = attested(image(Component.PSU, "3.1", banks="one_way", activation="ac_cycle"))
    await rig.attest()
    rollout_id = await rig.submit(change_class=ChangeClass.POWER_FABRIC)
    plan_hash = rig.store.tables.rollouts[rollout_id].plan_hash
    approval = sign(ALICE, "alice", rollout_id, plan_hash)
    rig.store.command(rollout_id, "approve", approval=approval)
    rig.store.command(rollout_id, "approve", approval=approval)
    await rig.worker.commands(rig.store)
    outcomes = [o or "" for _, o in rig.store.tables.commands.values()]
    assert "needs 2 distinct approvers; the plan has 1" in outcomes[0]
    assert "replayed" in outcomes[1]
    assert rig.state(rollout_id) is RolloutState.PLANNED
    rig.store.command(rollout_id, "approve", approval=sign(BOB, "bob", rollout_id, plan_hash))
    await rig.worker.commands(rig.store)
    assert rig.state(rollout_id) is RolloutState.RUNNING


async def test_a_replayed_signature_spelt_another_way_is_still_a_replay() -> None:
    rig = Rig()
    rig.bundle = attested(image(Component.PSU, "3.1", banks="one_way", activation="ac_cycle"))
    await rig.attest()
    rollout_id = await rig.submit(change_class=ChangeClass.POWER_FABRIC)
    plan_hash = rig.store.tables.rollouts[rollout_id].plan_hash
    approval = sign(ALICE, "alice", rollout_id, plan_hash)
    # 64 bytes in base64 leave 4 pad bits in the last character before "==": setting them
    # spells the same bytes differently (RFC 4648 3.5), and the decoder accepts it.
    text = approval.signature
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    last = alphabet[alphabet.index(text[-3]) | 0b1111]
    respelt = dataclasses.replace(approval, signature=text[:-3] + last + "==")
    assert respelt.signature != approval.signature
    assert base64.b64decode(respelt.signature) == base64.b64decode(approval.signature)
    rig.store.command(rollout_id, "approve", approval=approval)
    rig.store.command(rollout_id, "approve", approval=respelt)
    await rig.worker.commands(rig.store)
    outcomes = [o or "" for _, o in rig.store.tables.commands.values()]
    assert "replayed" in outcomes[1]
    assert rig.store.tables.rollouts[rollout_id].approvals == ("alice",)


async def test_a_worker_whose_lease_lapsed_cannot_commit_a_second_plan() -> None:
    rig = Rig()
    await rig.attest()
    data = intent(rig.bundle)
    await deliver(rig.store, on_intent_submitted, data)
    async with rig.store.transaction() as tx:
        stale = await tx.claim_intent(60, rig.store.now)  # a worker that then stalls
    assert stale is not None
    rig.later(61)
    assert await rig.worker.intent(rig.store, rig.fleet)  # another takes it over and plans
    async with rig.store.transaction() as tx:
        assert not await tx.still_holds(stale), "the stalled worker's token is fenced off"
    assert len(emitted(rig.store, RolloutPlanned)) == 1


async def test_an_idle_worker_waits_until_the_soak_ends_not_a_poll_longer() -> None:
    """A gate that passed before the soak ended leaves the wave to the timers: the worker's idle
    wait ends at the soak's end, so a long poll (fewer idle queries) delays no wave."""
    rig = Rig()
    await rig.attest()
    rollout_id = await rig.submit()
    assert rig.worker.idle_s(30.0) == 30.0  # nothing soaking: a whole poll
    await rig.complete_wave(rollout_id, 0)
    await rig.gate(GatePassed, rollout_id, 0)
    assert not await rig.worker.timers(rig.store)
    soak_s = rig.wave(rollout_id, 0).soak_s
    assert soak_s > 30
    assert rig.worker.idle_s(30.0) == 30.0
    rig.later(soak_s - 10)
    assert not await rig.worker.timers(rig.store)
    assert rig.worker.idle_s(30.0) == 10.0  # the soak ends before the next poll would
    rig.later(10)
    assert await rig.worker.timers(rig.store)  # and the wave passes at its end
    assert rig.wave(rollout_id, 0).state is WaveState.PASSED
    assert rig.worker.idle_s(30.0) == 30.0  # the next wave is released, not soaking
