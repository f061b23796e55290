"""One rollout per shipped dialect on the simulator (issue 29): a canary wave of one node, then a
wave of two, each node flashed the way its BMC profile says, chosen by preflight from what the
BMC says. Each BMC's ledger shows the profile's calls and nothing else: the push to the
profile's URI with its UpdateParameters (Targets, apply time, its fixed parameters), then ONE
activation reset per node of the profile's resource and ResetType (no Stage, no Activate where
the profile has none), and every node verified at the new version and given back.

Then item 6 on every dialect whose BMC can tell: an updater killed between recording the
activation and sending it ends the node ``cancelled`` (the BMC shows the image still staged,
the previous version running and no task), never quarantined, with nothing activated."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from lockstep_common.envelope import make_envelope, source_of
from lockstep_common.events.v1 import AttestedComponent, RolloutPlanned, WavePlan, WavePlanned
from lockstep_common.vocabulary import ChangeClass, Component
from lockstep_redfish import update as redfish_update
from lockstep_redfish.multipart import MultipartBody, multipart_body
from lockstep_sim import inventory
from lockstep_sim.options import SimOptions
from lockstep_sim.profiles import GB200, HGX_H100, ComponentClass
from lockstep_sim.runtime import FleetRuntime
from lockstep_updater.domain.progress import UpdateProgress, load
from lockstep_updater.domain.remedy import RemedyPolicy
from lockstep_updater.domain.steps import NodeStep
from lockstep_updater.executor import Executor
from lockstep_updater.handlers import Handlers
from lockstep_updater.ports import OWNER
from lockstep_updater.steps import activation
from lockstep_updater.store import UPDATE
from lockstep_updater.testing.memory_store import MemoryStore
from lockstep_updater.testing.sim_fleet import SimFacts, sim_executor
from tests.integration.sim.pldm_fixtures import package_for
from tests.integration.updater.conftest import ENV, FAST, ROLLOUT, STACK, World
from tests.integration.updater.test_executor_sim import plan_and_release
from tests.integration.updater.test_kill_restart import Killed

pytestmark = pytest.mark.integration
HANDLERS = Handlers(RemedyPolicy.AUTOMATIC)
PLANNER = source_of("planner")
FW = "/redfish/v1/UpdateService/FirmwareInventory"
LOGINS = {"session_create", "session_delete"}


@dataclass(frozen=True)
class Case:
    dialect: str
    hardware: str
    component: Component
    cls: ComponentClass
    version: str
    members: tuple[str, ...]  # what the node's members are called on this BMC
    push: str  # the ledger's action for the push (the last segment of the push URI)
    parameters: dict[str, Any]  # UpdateParameters beside Targets
    targets: list[str]  # Targets sent
    reset: str  # the ledger's action for the activation reset
    reset_type: str


def _cls(
    profile: tuple[ComponentClass, ...], kind: str, first: str | None = None
) -> ComponentClass:
    return next(c for c in profile if c.kind == kind and (first is None or c.ids[0] == first))


GPU = _cls(GB200, "gpu")
HGX_GPU = _cls(HGX_H100, "gpu")
TRAY_BMC = _cls(GB200, "bmc")
NIC = _cls(GB200, "nic", "NIC_0")
IMMEDIATE = {"@Redfish.OperationApplyTime": "Immediate"}
CASES = [
    Case(
        "nvidia-gb200-nvl",
        "gb200",
        Component.GPU_VBIOS,
        GPU,
        "97.00.9A.00.01",
        GPU.ids,
        "update-multipart",
        IMMEDIATE,
        [f"{FW}/{m}" for m in GPU.ids],
        "Chassis.Reset",
        "PowerCycle",
    ),
    Case(
        "nvidia-hgx",
        "hgx-h100",
        Component.GPU_VBIOS,
        HGX_GPU,
        "97.00.9A.00.01",
        HGX_GPU.ids,
        "update-multipart",
        IMMEDIATE,
        [f"{FW}/{m}" for m in HGX_GPU.ids],
        "ComputerSystem.Reset",
        "ForceRestart",
    ),
    Case(  # a GB200 tray behind a Supermicro BMC: its FW_BMC_0 is the capture's BMC member
        "supermicro-x13",
        "gb200",
        Component.BMC,
        TRAY_BMC,
        "GB200Nvl-25.03-1",
        ("BMC",),  # the HMC's HGX_FW_BMC_0 is its own firmware, not this host's BMC
        "upload",
        {
            **IMMEDIATE,
            "Oem": {
                "Supermicro": {
                    "BMC": {
                        "PreserveCfg": True,
                        "PreserveSdr": True,
                        "PreserveSsl": True,
                        "BackupBMC": True,
                    }
                }
            },
        },
        ["/redfish/v1/Managers/1"],  # the BMC member's RelatedItem, as Supermicro takes it
        "Manager.Reset",
        "GracefulRestart",  # the only ResetType the capture's Managers/1 allows
    ),
    Case(
        "dmtf-generic",
        "gb200",
        Component.NIC,
        NIC,
        "32.43.1000",
        NIC.ids,
        "update-multipart",
        {"@Redfish.OperationApplyTime": "OnReset"},
        [f"{FW}/{m}" for m in NIC.ids],
        "ComputerSystem.Reset",
        "GracefulRestart",
    ),
]


@pytest.fixture(params=CASES, ids=lambda c: c.dialect)
async def dialect_world(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[World, Case, list[dict[str, Any]]]]:
    case: Case = request.param
    bundle = tmp_path / "bundle"
    (bundle / "images").mkdir(parents=True)
    image = package_for(case.cls, case.version)
    (bundle / "images" / "fw.fwpkg").write_bytes(image)
    entry = AttestedComponent(
        profile=case.hardware,
        component=case.component,
        version=case.version,
        image="images/fw.fwpkg",
        sha384=hashlib.sha384(image).hexdigest(),
        size=len(image),
        banks="ab",
        activation="reset",
    )
    sent: list[dict[str, Any]] = []  # the UpdateParameters of every multipart push sent
    real = multipart_body

    def spy(parameters: dict[str, Any], data: bytes, filename: str) -> MultipartBody:
        sent.append(parameters)
        return real(parameters, data, filename)

    monkeypatch.setattr(redfish_update, "multipart_body", spy)
    options = SimOptions(
        3, case.hardware, dialect=case.dialect, time_scale=0.002, host_base="127.73.0.1", port=0
    )
    rt = FleetRuntime(options, scheduler_port=0)
    await rt.start()
    store = MemoryStore()
    async with store.transaction() as tx:
        await tx.record_bundle(STACK, str(bundle), (entry,))
    facts = SimFacts(rt, credentials="SIMBMC", profile=case.hardware)
    w = World(rt, store, facts, bundle, entry)
    try:
        yield w, case, sent
    finally:
        for ex in w.executors:
            await ex.close()
        await rt.stop()


async def _plan(w: World, case: Case, waves: list[tuple[str, ...]]) -> None:
    planned = RolloutPlanned(
        rollout_id=ROLLOUT,
        intent_id=uuid.uuid4(),
        stack_hash=STACK,
        change_class=ChangeClass.STANDARD,
        waves=tuple(WavePlan(number=n, node_ids=nodes) for n, nodes in enumerate(waves)),
    )
    async with w.store.transaction() as tx:
        await HANDLERS.rollout_planned(tx, make_envelope(planned, source=PLANNER), now=_now())


async def _release(w: World, case: Case, number: int, nodes: tuple[str, ...]) -> None:
    wave = WavePlanned(
        rollout_id=ROLLOUT,
        wave=number,
        node_ids=nodes,
        components=(case.component,),
        max_unavailable=1,
        failure_budget=0,
        soak_seconds=0,
    )
    async with w.store.transaction() as tx:
        env = make_envelope(wave, source=PLANNER, correlation_id=f"c{number}")
        await HANDLERS.wave_planned(tx, env, now=_now())


def _now() -> datetime:
    return datetime(2026, 3, 2, 12, tzinfo=UTC)


def _versions(w: World, node: str, case: Case) -> set[str]:
    comps = w.rt.simulator.bmc(node).node.components
    return {comps[m].version for m in case.members}


async def test_a_rollout_flashes_each_dialect_as_its_profile_says(
    dialect_world: tuple[World, Case, list[dict[str, Any]]],
) -> None:
    w, case, sent = dialect_world
    canary, rest = ("node-00000",), ("node-00001", "node-00002")
    await _plan(w, case, [canary, rest])
    for number, nodes in enumerate((canary, rest)):
        await _release(w, case, number, nodes)
        await w.settle()
        for node in nodes:
            item = next(i for i in w.store.items if i.node_id == node)
            assert item.state is NodeStep.DONE, item.reason
            progress = load(UPDATE, item.progress)
            assert isinstance(progress, UpdateProgress) and progress.bmc_profile == case.dialect
            assert _versions(w, node, case) == {case.version}
            assert w.rt.scheduler.node(node).drain is None
            owned = [e.action for e in w.rt.scheduler.ledger if e.node_id == node and e.by == OWNER]
            assert owned == ["drain", "resume"]
    for node in canary + rest:
        ledger = w.rt.simulator.bmc(node).ledger
        calls = [(e["action"], e.get("status")) for e in ledger if e["action"] not in LOGINS]
        reset_status = 202 if case.dialect == "nvidia-hgx" else 204  # HGX answers with a Task
        push_status = 204 if case.dialect == "dmtf-generic" else 202  # DSP0266 synchronous
        assert calls == [(case.push, push_status), (case.reset, reset_status)], calls
        (reset,) = [e for e in ledger if e["action"] == case.reset]
        assert reset["reset_type"] == case.reset_type
        assert reset["activated"]  # the reset is what ran the image
    expected = {**case.parameters, "Targets": case.targets}
    assert sent == [expected] * 3  # one push per node, no Stage, the profile's parameters


async def test_an_activation_recorded_but_never_sent_ends_cancelled_not_quarantined(
    dialect_world: tuple[World, Case, list[dict[str, Any]]],
) -> None:
    """Item 6: the updater dies right after committing ``activate_sent`` (the commit before the
    reset), is restarted, reads the BMC and finds nothing activated."""
    w, case, _ = dialect_world
    node = "node-00000"
    before = _versions(w, node, case)
    await _plan(w, case, [(node,)])
    await _release(w, case, 0, (node,))
    dying = w.executor(ActivationKiller(w.store))
    with pytest.raises(Killed):
        await w.settle(dying)
    item = w.store.item(node)
    progress = load(UPDATE, item.progress)
    assert isinstance(progress, UpdateProgress)
    assert progress.activate_sent and progress.activated_at is None  # recorded, not sent
    w.store.advance(FAST.lease_s + 1)
    await w.settle(restarted(w))
    item = w.store.item(node)
    assert item.state is NodeStep.CANCELLED, item.reason
    assert "never reached the BMC" in item.reason
    assert _versions(w, node, case) == before  # nothing activated
    assert [e for e in w.rt.simulator.bmc(node).ledger if e["action"] == case.reset] == []
    assert w.rt.scheduler.node(node).drain is None  # given back


class ActivationKiller:
    """The memory store, the process dying right after the transaction that recorded
    ``activate_sent`` committed (before the activation was sent), or with ``sent``, inside the
    one recording that it was sent (after the send: that record never commits)."""

    def __init__(self, store: MemoryStore, *, sent: bool = False) -> None:
        self.store, self.sent = store, sent

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Any]:
        async with self.store.transaction() as tx:
            yield tx
            docs = [i.progress for i in self.store.items]
            if self.sent and any("activated_at" in d for d in docs):
                raise Killed  # rolled back: the send happened, its record did not
        if not self.sent and any(d.get("activate_sent") and "activated_at" not in d for d in docs):
            raise Killed


def restarted(w: World) -> Executor:
    """The restarted updater, asking the BMC for a reset's time of 0.3 s (``reachable_s``)."""
    policy = replace(FAST, update=replace(FAST.update, reachable_s=0.3))
    ex = sim_executor(w.rt, w.store, w.facts, w.bundle, policy, ENV)
    w.executors.append(ex)
    return ex


async def test_a_bmc_that_cannot_tell_still_quarantines_an_unverified_node(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Item 6's other half: a BMC whose members do not say ``Staged`` cannot tell whether the
    activation reached it, so the node is verified, and its unmoved version quarantines it."""
    real = inventory.member_doc

    def silent(component: Any) -> dict[str, Any]:
        doc = real(component)
        doc.pop("Staged", None)
        return doc

    monkeypatch.setattr(inventory, "member_doc", silent)
    node = "node-00000"
    await plan_and_release(world, (node,))
    with pytest.raises(Killed):
        await world.settle(world.executor(ActivationKiller(world.store)))
    world.store.advance(FAST.lease_s + 1)
    await world.settle(world.executor())
    item = world.store.item(node)
    assert item.state is NodeStep.QUARANTINED, item.reason
    assert "not verified" in item.reason


@pytest.mark.parametrize("dialect_world", CASES[:1], ids=["nvidia-gb200-nvl"], indirect=True)
async def test_a_reset_sent_but_not_recorded_is_found_activated_not_cancelled(
    dialect_world: tuple[World, Case, list[dict[str, Any]]],
) -> None:
    """The other side of item 6: the reset reached the BMC and the worker died before recording
    it. The restarted updater sees the new version come up once the tray's power cycle is over
    (GB200: the images run only then, so they look unsent at first) and verifies the node; it
    never sends the reset twice."""
    w, case, _ = dialect_world
    node = "node-00000"
    await _plan(w, case, [(node,)])
    await _release(w, case, 0, (node,))
    with pytest.raises(Killed):
        await w.settle(w.executor(ActivationKiller(w.store, sent=True)))
    w.store.advance(FAST.lease_s + 1)
    await w.settle(restarted(w))
    item = w.store.item(node)
    assert item.state is NodeStep.DONE, item.reason
    assert _versions(w, node, case) == {case.version}
    assert len([e for e in w.rt.simulator.bmc(node).ledger if e["action"] == case.reset]) == 1


async def test_an_activation_still_running_when_found_keeps_the_node_drained_until_it_ends(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by the chaos test: the activation reached the BMC, its sender died before
    recording the task, and the restarted updater verified and gave the node back while the
    BMC still ran it. Now, while the BMC shows a task running, the node stays in ``activating``,
    drained; once the task ends it is verified as usual."""
    running = [2]  # the BMC's TaskService shows the activation running for two reads

    async def tasks(_update: Any) -> int:
        running[0] -= 1
        return 1 if running[0] >= 0 else 0

    node = "node-00000"
    await plan_and_release(world, (node,))
    with pytest.raises(Killed):
        await world.settle(world.executor(ActivationKiller(world.store, sent=True)))
    monkeypatch.setattr(activation, "_running_tasks", tasks)
    world.store.advance(FAST.lease_s + 1)
    ex = restarted(world)
    for _ in range(2):
        assert await ex.step()
        item = world.store.item(node)
        assert item.state is NodeStep.ACTIVATING, item.reason
        assert "waiting for it to end" in item.reason
        assert world.rt.scheduler.node(node).drain is not None  # not given back under it
        world.store.advance(FAST.retry_s)
    await world.settle(ex)
    item = world.store.item(node)
    assert item.state is NodeStep.DONE, item.reason
    assert world.actions(node, "UpdateService.Activate")[-1]["status"] in (200, 202)
    assert len(world.actions(node, "UpdateService.Activate")) == 1  # never sent again
