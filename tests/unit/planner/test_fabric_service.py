"""Fabric domains in the planner service, on the in-memory store (seed 002; issue 10,
deliverable 6): domains are learned from the fleet and their occupancy from the scheduler, a
switch-firmware rollout defers an occupied domain to a wave of its own that is released only
once the domain is free, domains are PROVISIONING while their wave runs and land on the target
when it passes, pins are refused while PROVISIONING, and every change is audited."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from lockstep_common.events.v1 import (
    GatePassed,
    GateTripped,
    RolloutCompleted,
    RolloutPlanned,
    WavePlanned,
)
from lockstep_common.vocabulary import ChangeClass, Component
from lockstep_planner.adapters.scheduler_jobs import SchedulerJobs
from lockstep_planner.adapters.slurm_jobs import SlurmJobs
from lockstep_planner.app import occupancy_of
from lockstep_planner.domain.fabric import Lifecycle, UpdateState
from lockstep_planner.domain.rollout import RolloutState, WaveState
from lockstep_planner.handlers import on_bundle_attested
from lockstep_planner.settings import Settings
from lockstep_planner.store import FABRIC_KEY
from lockstep_planner.testing.kit import NEW_DRIVER, attested, fleet_node, image, sign
from lockstep_planner.testing.memory_store import MemoryOccupancy
from tests.unit.planner.test_service import ALICE, Rig, deliver, emitted

pytestmark = pytest.mark.unit
SYNC_S = 30.0


def switch_bundle() -> Any:
    """Driver, GSP and NVSwitch tray firmware: the switch firmware moves whole domains."""
    return attested(
        image(Component.DRIVER, NEW_DRIVER),
        image(Component.GPU_GSP, NEW_DRIVER),
        image(Component.NVSWITCH, "1.20.3", activation="reset"),
    )


class FabricRig(Rig):
    """20 nodes in five fabric domains of four (d0: n000-n003, ...), a scheduler, a switch
    bundle."""

    def __init__(self) -> None:
        super().__init__([fleet_node(i, fabric_domain=f"d{i // 4}") for i in range(20)])
        self.bundle = switch_bundle()
        self.jobs = MemoryOccupancy()
        self.worker._fabric_sync_s = SYNC_S

    async def sync(self) -> bool:
        return await self.worker.fabric(self.store, self.fleet, self.jobs)

    def domain(self, name: str) -> Any:
        return self.store.tables.fabric[name].domain

    async def approved(self, rollout_id: str) -> None:
        plan_hash = self.store.tables.rollouts[rollout_id].plan_hash
        self.store.command(
            rollout_id, "approve", approval=sign(ALICE, "alice", rollout_id, plan_hash)
        )
        await self.worker.commands(self.store)

    async def pass_wave(self, rollout_id: str, number: int) -> None:
        await self.complete_wave(rollout_id, number)
        self.later(self.wave(rollout_id, number).soak_s)
        await self.gate(GatePassed, rollout_id, number)

    def audit(self, domain: str) -> list[tuple[str, str]]:
        return [(a.actor, a.action) for a in self.store.audit_of(FABRIC_KEY + domain)]


async def attest_other(rig: FabricRig) -> Any:
    """Attest the rig's bundle and another switch bundle; the other is returned."""
    await rig.attest()
    other = attested(image(Component.NVSWITCH, "1.21.0", activation="reset"))
    await deliver(rig.store, on_bundle_attested, other)
    return other


async def started(rig: FabricRig) -> str:
    await rig.attest()
    rollout_id = await rig.submit(change_class=ChangeClass.ROUTINE, approval_ref="CHG-7")
    await rig.approved(rollout_id)
    return rollout_id


async def test_domains_are_learned_from_the_fleet_and_occupied_by_the_schedulers_jobs() -> None:
    rig = FabricRig()
    rig.jobs.busy = {"n005"}
    assert await rig.sync() is False  # nothing was waiting for a domain
    assert sorted(rig.store.tables.fabric) == ["d0", "d1", "d2", "d3", "d4"]
    assert rig.store.tables.fabric["d1"].node_ids == ("n004", "n005", "n006", "n007")
    assert rig.domain("d1").lifecycle is Lifecycle.OCCUPIED
    assert rig.domain("d0").lifecycle is Lifecycle.AVAILABLE
    assert rig.audit("d1") == [("inventory", "discovered"), ("scheduler", "occupied")]
    assert "a job runs on n005" in rig.store.audit_of(FABRIC_KEY + "d1")[-1].detail
    # The same answer again changes nothing and audits nothing (a repeated poll is harmless).
    rig.later(SYNC_S)
    await rig.sync()
    assert len(rig.audit("d1")) == 2
    rig.jobs.busy = set()
    rig.later(SYNC_S)
    await rig.sync()
    assert rig.domain("d1").lifecycle is Lifecycle.AVAILABLE
    assert rig.audit("d1")[-1] == ("scheduler", "available")


async def test_a_silent_scheduler_leaves_lifecycles_as_they_were() -> None:
    rig = FabricRig()
    rig.jobs.busy = {"n000"}
    await rig.sync()
    rig.jobs.down = True
    rig.jobs.busy = set()
    rig.later(SYNC_S)
    assert await rig.sync() is False
    assert rig.domain("d0").lifecycle is Lifecycle.OCCUPIED


async def test_an_occupied_domain_is_deferred_to_its_own_wave_and_updated_once_free() -> None:
    rig = FabricRig()
    rig.jobs.busy = {"n005"}
    await rig.sync()
    rollout_id = await started(rig)
    rollout = rig.store.tables.rollouts[rollout_id]
    deferred = [e for e in rollout.plan["excluded"] if e["reason"].startswith("deferred: ")]
    assert [e["node"] for e in deferred] == ["n004", "n005", "n006", "n007"]
    assert "fabric domain d1 is OCCUPIED" in deferred[0]["reason"]
    [planned] = emitted(rig.store, RolloutPlanned)
    last = planned.waves[-1]
    assert last.node_ids == ("n004", "n005", "n006", "n007")
    assert rollout.plan["fabric"]["deferred"] == {
        str(last.number): {
            "domain": "d1",
            "reason": deferred[0]["reason"].removeprefix("deferred: "),
        }
    }
    assert all(not set(w.node_ids) & set(last.node_ids) for w in planned.waves[:-1])
    # Every domain the rollout moves is pinned to its bundle and held by it.
    for name in ("d0", "d1", "d2", "d3", "d4"):
        assert (rig.domain(name).target, rig.domain(name).rollout) == (
            rig.bundle.stack_hash,
            rollout_id,
        )
    canary = rig.wave(rollout_id, 0)
    canary_domains = {f"d{int(n[1:]) // 4}" for n in canary.node_ids}
    for name in canary_domains:
        assert rig.domain(name).lifecycle is Lifecycle.PROVISIONING
        assert rig.domain(name).current is None
    for number in range(last.number):
        await rig.pass_wave(rollout_id, number)
    # Every other wave passed: the deferred one waits while the job runs.
    assert rig.state(rollout_id) is RolloutState.RUNNING
    assert rig.wave(rollout_id, last.number).state is WaveState.PENDING
    assert last.number not in [w.wave for w in emitted(rig.store, WavePlanned)]
    assert "fabric domain(s) d1 OCCUPIED" in rig.store.tables.rollouts[rollout_id].reason
    assert rig.domain("d1").update_state is UpdateState.WILL_UPDATE
    assert "waits until no cluster occupies the domain" in rig.domain("d1").update_reason
    for name in ("d0", "d2", "d3", "d4"):
        assert (rig.domain(name).current, rig.domain(name).lifecycle) == (
            rig.bundle.stack_hash,
            Lifecycle.AVAILABLE,
        )
        assert rig.domain(name).update_state is UpdateState.NO_UPDATE
    # The job ends: the next fabric sync releases the deferred wave.
    rig.jobs.busy = set()
    rig.later(SYNC_S)
    assert await rig.sync() is True
    released = emitted(rig.store, WavePlanned)[-1]
    assert (released.wave, released.node_ids) == (last.number, last.node_ids)
    assert released.strata[0].control_ids, "gated against nodes of its stratum that moved"
    assert rig.domain("d1").lifecycle is Lifecycle.PROVISIONING
    assert rig.store.tables.rollouts[rollout_id].reason == ""  # no longer waiting
    await rig.pass_wave(rollout_id, last.number)
    assert rig.state(rollout_id) is RolloutState.COMPLETED
    assert emitted(rig.store, RolloutCompleted)[0].nodes_updated == 20
    d1 = rig.domain("d1")
    assert (d1.current, d1.target, d1.lifecycle, d1.rollout, d1.update_state) == (
        rig.bundle.stack_hash,
        rig.bundle.stack_hash,
        Lifecycle.AVAILABLE,
        None,
        UpdateState.NO_UPDATE,
    )
    assert [a for _, a in rig.audit("d1")] == [
        "discovered",
        "occupied",
        "pinned",
        "available",
        "provisioning",
        "updated",
    ]


async def test_a_job_starting_after_the_plan_holds_its_domains_wave_back() -> None:
    rig = FabricRig()
    await rig.sync()
    rollout_id = await started(rig)
    wave1 = rig.wave(rollout_id, 1)
    busy_domain = f"d{int(wave1.node_ids[0][1:]) // 4}"
    rig.jobs.busy = {wave1.node_ids[0]}
    rig.later(SYNC_S)
    await rig.sync()
    await rig.pass_wave(rollout_id, 0)
    assert rig.wave(rollout_id, 1).state is WaveState.PENDING
    assert [w.wave for w in emitted(rig.store, WavePlanned)] == [0]
    waits = [a for a in rig.store.audit_of(rollout_id) if a.action == "wave deferred"]
    assert len(waits) == 1 and busy_domain in waits[0].detail
    rig.jobs.busy = set()
    rig.later(SYNC_S)
    await rig.sync()
    assert [w.wave for w in emitted(rig.store, WavePlanned)] == [0, 1]


async def test_pin_is_refused_while_provisioning_and_for_unknown_domains_or_bundles() -> None:
    rig = FabricRig()
    await rig.sync()
    other = await attest_other(rig)
    first = rig.bundle
    rollout_id = await rig.submit(change_class=ChangeClass.ROUTINE, approval_ref="CHG-7")
    await rig.approved(rollout_id)
    busy = f"d{int(rig.wave(rollout_id, 0).node_ids[0][1:]) // 4}"
    assert rig.domain(busy).lifecycle is Lifecycle.PROVISIONING
    rig.store.command(FABRIC_KEY + busy, "pin", by="bob", bundle=other.stack_hash)
    rig.store.command(FABRIC_KEY + "d9", "pin", by="bob", bundle=other.stack_hash)
    rig.store.command(FABRIC_KEY + busy, "pin", by="bob", bundle="f" * 64)
    await rig.worker.commands(rig.store)
    outcomes = [o for _, o in list(rig.store.tables.commands.values())[-3:]]
    assert outcomes == [
        f"refused: fabric domain {busy} is PROVISIONING: cannot pin {other.stack_hash} until "
        "it is AVAILABLE",
        "refused: no fabric domain d9",
        f"refused: bundle with stack {'f' * 64} is not attested",
    ]
    assert rig.domain(busy).target == first.stack_hash
    assert rig.audit(busy)[-1] == ("bob", "pin refused")


async def test_an_operator_pin_sets_the_target_and_a_rollout_of_another_bundle_is_refused() -> None:
    rig = FabricRig()
    await rig.sync()
    other = await attest_other(rig)
    rig.store.command(FABRIC_KEY + "d2", "pin", by="bob", bundle=other.stack_hash)
    await rig.worker.commands(rig.store)
    assert list(rig.store.tables.commands.values())[-1][1] == "done"
    d2 = rig.domain("d2")
    assert (d2.target, d2.update_state, d2.rollout) == (
        other.stack_hash,
        UpdateState.WILL_UPDATE,
        None,
    )
    assert rig.store.tables.fabric["d2"].changed_by == "bob"
    assert rig.audit("d2")[-1] == ("bob", "pinned")
    # The same pin again is done and changes nothing.
    rig.store.command(FABRIC_KEY + "d2", "pin", by="bob", bundle=other.stack_hash)
    await rig.worker.commands(rig.store)
    assert list(rig.store.tables.commands.values())[-1][1] == "done; already pinned to it"
    rollout_id = await rig.submit(change_class=ChangeClass.ROUTINE)
    [row] = [i for i in rig.store.tables.intents.values() if i.rollout_id == rollout_id]
    assert row.state == "refused"
    reasons = row.reasons
    assert any(f"fabric domain d2 is pinned to {other.stack_hash}" in r for r in reasons)
    assert rollout_id not in rig.store.tables.rollouts


async def test_a_halted_rollout_lets_its_domains_go_with_the_bundle_unknown() -> None:
    rig = FabricRig()
    await rig.sync()
    rollout_id = await started(rig)
    canary = {f"d{int(n[1:]) // 4}" for n in rig.wave(rollout_id, 0).node_ids}
    await rig.complete_wave(rollout_id, 0)
    await rig.gate(GateTripped, rollout_id, 0, passed=False)
    assert rig.state(rollout_id) is RolloutState.HALTED
    for name in sorted(rig.store.tables.fabric):
        domain = rig.domain(name)
        assert domain.rollout is None and domain.lifecycle is Lifecycle.AVAILABLE
        assert domain.target == rig.bundle.stack_hash
        assert domain.update_state is UpdateState.WILL_UPDATE  # the pin is still pending
        if name in canary:
            assert domain.current is None
            assert rig.audit(name)[-1] == ("planner", "update abandoned")
        else:
            assert rig.audit(name)[-1] == ("planner", "released")


async def test_a_domain_with_a_failed_node_is_not_marked_updated_when_its_wave_passes() -> None:
    """A wave may end with failures inside its budget and still pass: the domains whose nodes
    all moved run the bundle; one holding a failed node stays WILL_UPDATE, bundle unknown."""
    rig = FabricRig()
    await rig.sync()
    rollout_id = await started(rig)
    final = max(n for r, n in rig.store.tables.waves if r == rollout_id)
    for number in range(final):
        await rig.pass_wave(rollout_id, number)
    last = rig.wave(rollout_id, final)
    rig.store.tables.waves[(rollout_id, final)] = dataclasses.replace(last, failure_budget=1)
    failed = last.node_ids[0]
    broken = f"d{int(failed[1:]) // 4}"
    await rig.complete_wave(rollout_id, final, failed=(failed,))
    rig.later(last.soak_s)
    await rig.gate(GatePassed, rollout_id, final)
    assert rig.state(rollout_id) is RolloutState.COMPLETED
    domain = rig.domain(broken)
    assert (domain.current, domain.lifecycle, domain.rollout) == (None, Lifecycle.AVAILABLE, None)
    assert domain.update_state is UpdateState.WILL_UPDATE
    assert rig.audit(broken)[-1] == ("planner", "update incomplete")
    moved = {f"d{int(n[1:]) // 4}" for n in last.node_ids} - {broken}
    assert moved, "the wave holds other domains"
    for name in moved:  # the wave's other domains moved whole
        assert rig.domain(name).current == rig.bundle.stack_hash
        assert rig.domain(name).update_state is UpdateState.NO_UPDATE


async def test_a_software_bundle_leaves_fabric_domains_alone() -> None:
    rig = FabricRig()
    rig.bundle = attested()
    rig.jobs.busy = {"n005"}
    await rig.sync()
    await rig.attest()
    rollout_id = await rig.submit()
    assert rig.store.tables.rollouts[rollout_id].plan["fabric"] == {}
    moved = {n for w in emitted(rig.store, RolloutPlanned)[0].waves for n in w.node_ids}
    assert "n005" in moved  # the updater waits for its drain, as before
    assert rig.domain("d1").rollout is None


def test_settings_choose_where_running_jobs_are_read() -> None:
    assert occupancy_of(Settings()) is None
    sim = occupancy_of(Settings(scheduler_url="http://127.0.0.1:8001"))
    assert isinstance(sim, SchedulerJobs) and sim.base_url == "http://127.0.0.1:8001"
    slurm = occupancy_of(Settings(scheduler="slurm", slurm_conf="/etc/slurm/x.conf"))
    assert isinstance(slurm, SlurmJobs) and slurm.squeue == "squeue"


async def test_a_domain_already_on_the_bundle_is_recorded_as_no_update() -> None:
    rig = FabricRig()
    on_it = {
        Component.DRIVER: NEW_DRIVER,
        Component.GPU_GSP: NEW_DRIVER,
        Component.NVSWITCH: "1.20.3",
    }
    rig.fleet.fleet[16:] = [
        fleet_node(i, fabric_domain="d4", observed=on_it) for i in range(16, 20)
    ]
    await rig.sync()
    rollout_id = await started(rig)
    plan = rig.store.tables.rollouts[rollout_id].plan
    assert plan["fabric"]["at_target"] == ["d4"] and "d4" not in plan["fabric"]["domains"]
    d4 = rig.domain("d4")
    assert (d4.current, d4.target, d4.rollout, d4.update_state) == (
        rig.bundle.stack_hash,
        rig.bundle.stack_hash,
        None,
        UpdateState.NO_UPDATE,
    )
    assert rig.audit("d4")[-1] == ("planner", "at target")


async def test_a_pin_to_another_bundle_between_plan_and_approval_aborts_before_any_work() -> None:
    rig = FabricRig()
    await rig.sync()
    other = await attest_other(rig)
    rollout_id = await rig.submit(change_class=ChangeClass.ROUTINE, approval_ref="CHG-7")
    assert rig.state(rollout_id) is RolloutState.PLANNED
    rig.store.command(FABRIC_KEY + "d3", "pin", by="bob", bundle=other.stack_hash)
    await rig.worker.commands(rig.store)
    await rig.approved(rollout_id)
    assert rig.state(rollout_id) is RolloutState.ABORTED
    reason = rig.store.tables.rollouts[rollout_id].reason
    assert reason.startswith(
        f"fabric domain conflict: fabric domain d3 is pinned to {other.stack_hash}"
    )
    assert not emitted(rig.store, WavePlanned)
    assert all(rig.domain(d).rollout is None for d in rig.store.tables.fabric)
    assert rig.domain("d3").target == other.stack_hash
