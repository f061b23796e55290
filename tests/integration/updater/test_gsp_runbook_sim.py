"""The GSP / driver runbook (seed 004) and the in-band step against the simulator's node agents
(the agent's own command channel and executor over NATS, ``conftest.agent_bus``), its BMCs and
scheduler, on the in-memory store: a GSP mismatch is realigned end to end with the package the
latest bundle attests for the pin, Secure Boot rejection quarantines without a retry, an updater
killed at any write mid-runbook resumes without reinstalling twice (the agent's ledger), a
driver component of a rollout bundle is installed through the agent after the firmware, and
hostile drift events (unknown node, duplicates) change nothing."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from lockstep_common import natsconn
from lockstep_common.envelope import make_envelope, source_of
from lockstep_common.events.v1 import (
    AttestedComponent,
    DeviceFailed,
    DeviceRolledBack,
    DeviceVerified,
    DriftDetected,
    DriftItem,
    DriftResolved,
    RolloutPlanned,
    WavePlan,
    WavePlanned,
)
from lockstep_common.identities import agent_identity
from lockstep_common.provenance import UPDATER
from lockstep_common.vocabulary import (
    ChangeClass,
    Component,
    DriftKind,
    RollbackMechanism,
    Severity,
)
from lockstep_sim.agents.commands import package_bytes
from lockstep_sim.agents.state import Phase
from lockstep_updater.adapters.agent_commands import NatsAgentCommands
from lockstep_updater.adapters.node_agent_nats import NatsNodeAgent
from lockstep_updater.domain.inband import AgentState
from lockstep_updater.domain.remedy import RemedyPolicy
from lockstep_updater.domain.steps import NodeStep
from lockstep_updater.executor import Executor
from lockstep_updater.handlers import Handlers
from lockstep_updater.ports import (
    OWNER,
    AgentOrder,
    AgentUnavailable,
)
from tests.integration.sim.pldm_fixtures import NEW_GPU_VERSION
from tests.integration.updater.conftest import AGENT_NS, FAST, ROLLOUT, STACK, AgentBus, World
from tests.integration.updater.test_kill_restart import Killed, KillingStore

HANDLERS = Handlers(RemedyPolicy.AUTOMATIC)
NOW = datetime(2026, 3, 2, 12, tzinfo=UTC)  # handlers are given the time

pytestmark = pytest.mark.integration
INVENTORY = source_of("inventory")
OLD, NEW = "580.65.06", "580.95.05"


PREVIOUS, CURRENT = "1" * 64, "2" * 64  # the bundles that attested OLD, then NEW


@pytest.fixture(autouse=True)
async def attested_drivers(world: World) -> AsyncIterator[None]:
    """The driver packages of OLD and NEW, each in the bundle that attested it (what the
    simulated repository serves for them): the runbook installs only these."""
    async with world.store.transaction() as tx:
        for stack, version in ((PREVIOUS, OLD), (CURRENT, NEW)):
            entry = driver_in_bundle(world, package_bytes(version), version)
            await tx.record_bundle(stack, str(world.bundle), (entry,))
    yield


@pytest.fixture
def bus(agent_bus: AgentBus) -> AgentBus:
    return agent_bus


def agent_executor(w: World, bus: AgentBus, store: Any = None) -> Executor:
    ex = w.executor(store)
    ex.inband.agent = bus.agent
    return ex


def break_gsp(w: World, node: str) -> None:
    """Seed 004's trigger, as the simulator's gsp_mismatch drift makes it: an interrupted
    upgrade to NEW leaves no /lib/firmware/nvidia/NEW/, and the reboot loads NEW anyway."""
    software = w.rt.software[node]
    knobs = software.faults
    software.faults = replace(knobs, missing_firmware_dir=True)
    software.install_driver(NEW)
    software.reboot()
    software.faults = knobs
    assert software.phase is Phase.GSP_MISMATCH


def drift(node: str) -> DriftDetected:
    return DriftDetected(
        node_id=node,
        site="site-a",
        stack_hash=None,
        items=(
            DriftItem(
                component=Component.GPU_GSP,
                expected=NEW,
                actual=None,
                kind=DriftKind.GSP_MISMATCH,
                severity=Severity.CRITICAL,
                detail=f"no /lib/firmware/nvidia/{NEW}/ for the loaded module",
            ),
        ),
    )


async def deliver_drift(w: World, node: str, policy: RemedyPolicy = RemedyPolicy.AUTOMATIC) -> None:
    async with w.store.transaction() as tx:
        await Handlers(policy).drift_detected(
            tx, make_envelope(drift(node), source=INVENTORY), now=NOW
        )


def agent_ledger(w: World, node: str) -> list[str]:
    """The steps the node's agent carried out, in order (the simulator's ``agent_ledger``)."""
    return [e["step"] for e in w.rt.agent_ledger if e["node"] == node and e["outcome"] != "refused"]


def owned(w: World, node: str) -> list[str]:
    return [e.action for e in w.rt.scheduler.ledger if e.node_id == node and e.by == OWNER]


async def test_a_gsp_mismatch_is_realigned_by_the_runbook_end_to_end(
    world: World, bus: AgentBus
) -> None:
    w = world
    node = w.rt.fleet[0].id
    break_gsp(w, node)
    await deliver_drift(w, node)
    await w.settle(agent_executor(w, bus))
    item = w.store.item(node)
    assert (item.kind, item.state) == ("remedy", NodeStep.DONE), item.reason
    state = w.rt.software[node].state
    assert (state.loaded_module, state.gsp_firmware) == (NEW, NEW)
    assert NEW in state.firmware_dirs and w.rt.software[node].diag_passes()
    # One unit: one install (its DKMS build included), one reboot; the node given back.
    assert agent_ledger(w, node) == ["install-driver", "reboot"]
    assert owned(w, node) == ["drain", "resume"] and w.rt.scheduler.node(node).drain is None
    history = [(r.step, r.outcome) for r in await _history(w, node)]
    assert history == [
        ("preflight", "cordoning"),
        ("cordoning", "draining"),
        ("draining", "in_band"),
        ("in_band", "uncordoning"),
        ("uncordoning", "done"),
    ]
    (verified,) = [e for e in w.store.events.events if isinstance(e, DeviceVerified)]
    assert (verified.component, verified.to_version) == (Component.DRIVER, NEW)
    assert verified.rollout_id == item.rollout_id and item.rollout_id.startswith("remedy-")
    assert [i.node_id for i in w.store.items] == [node]  # no other node touched


async def test_secure_boot_rejection_quarantines_and_is_not_retried(
    world: World, bus: AgentBus
) -> None:
    w = world
    node = w.rt.fleet[1].id
    break_gsp(w, node)
    software = w.rt.software[node]
    software.faults = replace(software.faults, secure_boot_rejects_module=True)
    await deliver_drift(w, node)
    await w.settle(agent_executor(w, bus))
    item = w.store.item(node)
    assert item.state is NodeStep.QUARANTINED
    assert "Secure Boot rejected" in item.reason and "not retried" in item.reason
    # No fallback branch, no second attempt: one install, one reboot, and the node kept out.
    assert agent_ledger(w, node) == ["install-driver", "reboot"]
    assert w.rt.scheduler.node(node).drain is not None
    (failed,) = [e for e in w.store.events.events if isinstance(e, DeviceFailed)]
    assert failed.step == "in_band" and "Secure Boot" in failed.reason
    await deliver_drift(w, node)  # the drift is still there: a human decides, not a loop
    assert len(w.store.items) == 1


async def test_a_unit_that_does_not_come_up_clean_goes_back_to_the_known_good_branch(
    world: World,
    bus: AgentBus,
) -> None:
    w = world
    node = w.rt.fleet[2].id
    break_gsp(w, node)
    software = w.rt.software[node]
    # The target's package keeps shipping no firmware dir: the repair cannot align NEW.
    software.faults = replace(software.faults, missing_firmware_dir=True)
    await deliver_drift(w, node)
    await w.settle(agent_executor(w, bus))
    item = w.store.item(node)
    assert item.state is NodeStep.DONE, item.reason
    assert f"back on the previous known-good branch {OLD}" in item.reason
    assert (software.state.loaded_module, software.state.gsp_firmware) == (OLD, OLD)
    assert agent_ledger(w, node) == ["install-driver", "reboot", "install-driver", "reboot"]
    (back,) = [e for e in w.store.events.events if isinstance(e, DeviceRolledBack)]
    assert (back.from_version, back.to_version) == (NEW, OLD)
    assert back.mechanism is RollbackMechanism.IN_BAND_FALLBACK
    assert w.rt.scheduler.node(node).drain is None


WRITES_OF_A_RUNBOOK = 7
"""cordoning, drained, install announced, reboot announced, verified, given back, plus the
preflight's move: every state write of a clean run."""


@pytest.mark.parametrize("committed", [False, True])
@pytest.mark.parametrize("at", range(1, WRITES_OF_A_RUNBOOK + 1))
async def test_killed_at_any_write_mid_runbook_resumes_without_reinstalling(
    world: World, bus: AgentBus, at: int, committed: bool
) -> None:
    w = world
    node = w.rt.fleet[3].id
    break_gsp(w, node)
    await deliver_drift(w, node)
    dying = agent_executor(w, bus, KillingStore(w.store, at, committed=committed))
    with pytest.raises(Killed):
        await w.settle(dying)
    w.store.advance(FAST.lease_s + 1)  # the dead holder's lease lapses
    await w.settle(agent_executor(w, bus))  # the restarted updater
    item = w.store.item(node)
    steps = agent_ledger(w, node)
    assert steps.count("install-driver") <= 1, steps  # never reinstalled
    assert steps.count("reboot") <= 1, steps
    if item.state is NodeStep.DONE:
        assert steps == ["install-driver", "reboot"]
        assert w.rt.software[node].state.loaded_module == NEW
        assert w.rt.scheduler.node(node).drain is None
    else:
        # Killed between "install (or reboot) is being sent" and sending it: the agent shows
        # none, so the restarted updater never sends it again; the node stays out, with why.
        assert item.state is NodeStep.QUARANTINED and "not sent again" in item.reason


async def test_the_kill_points_cover_every_write_of_a_runbook(world: World, bus: AgentBus) -> None:
    w = world
    node = w.rt.fleet[3].id
    break_gsp(w, node)
    await deliver_drift(w, node)
    counting = KillingStore(w.store, at=0)
    await w.settle(agent_executor(w, bus, counting))
    assert counting.writes == WRITES_OF_A_RUNBOOK


def driver_in_bundle(w: World, package: bytes, version: str = NEW) -> AttestedComponent:
    """The driver package ``package``, written into the world's bundle, as attest records it."""
    (w.bundle / "images" / f"driver-{version}.run").write_bytes(package)
    return AttestedComponent(
        profile="gb200",
        component=Component.DRIVER,
        version=version,
        image=f"images/driver-{version}.run",
        sha384=hashlib.sha384(package).hexdigest(),
        size=len(package),
        banks="one_way",
        activation="in_band",
    )


async def test_a_driver_component_of_a_rollout_is_installed_through_the_agent(
    world: World,
    bus: AgentBus,
) -> None:
    w = world
    node = w.rt.fleet[0].id
    driver = driver_in_bundle(w, package_bytes(NEW))  # what the repository serves
    async with w.store.transaction() as tx:
        await tx.record_bundle(STACK, str(w.bundle), (w.gpu, driver))
    await _release(w, node, (Component.GPU_VBIOS, Component.DRIVER))
    await w.settle(agent_executor(w, bus))
    item = w.store.item(node)
    assert item.state is NodeStep.DONE, item.reason
    assert w.gpu_versions(node) == {NEW_GPU_VERSION} and len(w.pushes(node)) == 1
    assert w.rt.software[node].state.loaded_module == NEW
    assert agent_ledger(w, node) == ["install-driver", "reboot"]
    # Firmware first, verified by reading it back; then the driver unit; then given back.
    moves = [(r.step, r.outcome) for r in await _history(w, node)]
    assert moves[-3:] == [
        ("verifying", "in_band"),
        ("in_band", "uncordoning"),
        ("uncordoning", "done"),
    ]
    verified = {
        e.component: e.to_version for e in w.store.events.events if isinstance(e, DeviceVerified)
    }
    assert verified == {Component.GPU_VBIOS: NEW_GPU_VERSION, Component.DRIVER: NEW}


async def test_a_rollout_node_already_on_the_driver_needs_no_in_band_write(
    world: World, bus: AgentBus
) -> None:
    w = world
    node = w.rt.fleet[1].id
    package = b"nvidia driver package " + OLD.encode()
    (w.bundle / "images" / "driver.run").write_bytes(package)
    driver = AttestedComponent(
        profile="gb200",
        component=Component.DRIVER,
        version=OLD,  # what every simulated node runs from the start
        image="images/driver.run",
        sha384=hashlib.sha384(package).hexdigest(),
        size=len(package),
        banks="one_way",
        activation="in_band",
    )
    async with w.store.transaction() as tx:
        await tx.record_bundle(STACK, str(w.bundle), (driver,))
    await _release(w, node, (Component.DRIVER,))
    await w.settle(agent_executor(w, bus))
    item = w.store.item(node)
    assert item.state is NodeStep.DONE and "nothing written" in item.reason
    assert agent_ledger(w, node) == [] and owned(w, node) == []


async def test_the_agent_channel_refuses_wrong_credentials_and_nothing_is_installed(
    world: World, bus: AgentBus
) -> None:
    w = world
    node = w.rt.fleet[2].id
    break_gsp(w, node)
    await deliver_drift(w, node)
    # Another node's own identity (its enrolled key) is let in, but may not send a command:
    # the item fails and the node is never touched. (A key the server never enrolled is not
    # even let in: tests/integration/agent.)
    other = await natsconn.connect(
        bus.server.client(agent_identity(w.rt.fleet[0].id)), name="impostor"
    )
    try:
        ex = w.executor()
        commands = NatsAgentCommands(other, AGENT_NS, source_of(UPDATER), timeout_s=0.05)
        ex.inband.agent = NatsNodeAgent(commands)
        await w.settle(ex)
    finally:
        await other.close()
    item = w.store.item(node)
    assert item.state is NodeStep.FAILED and "no answer" in item.reason
    assert agent_ledger(w, node) == [] and owned(w, node) == []


async def test_a_pin_no_bundle_attests_fails_at_preflight_and_nothing_is_touched(
    world: World, bus: AgentBus
) -> None:
    w = world
    node = w.rt.fleet[1].id
    break_gsp(w, node)
    async with w.store.transaction() as tx:  # the bundle of NEW, attested again without it
        await tx.record_bundle(CURRENT, str(w.bundle), (w.gpu,))
    await deliver_drift(w, node)
    await w.settle(agent_executor(w, bus))
    item = w.store.item(node)
    assert item.state is NodeStep.FAILED
    assert f"no attested bundle names driver {NEW} for profile gb200" in item.reason
    assert agent_ledger(w, node) == [] and owned(w, node) == []
    assert w.rt.software[node].phase is Phase.GSP_MISMATCH  # as it was


async def test_hostile_drift_events_change_nothing(world: World, bus: AgentBus) -> None:
    w = world
    node = w.rt.fleet[0].id
    break_gsp(w, node)
    # Duplicates (a redelivery, or the inventory saying it again): one item.
    for _ in range(3):
        await deliver_drift(w, node)
    # A node nobody knows: recorded, then failed at preflight without a call anywhere.
    await deliver_drift(w, "node-unknown")
    # Other drift kinds, or the policy off: nothing.
    other = drift(w.rt.fleet[1].id).model_copy(
        update={"items": (drift(node).items[0].model_copy(update={"kind": DriftKind.UNEXPECTED}),)}
    )
    async with w.store.transaction() as tx:
        await HANDLERS.drift_detected(tx, make_envelope(other, source=INVENTORY), now=NOW)
    await deliver_drift(w, w.rt.fleet[2].id, RemedyPolicy.OFF)
    assert sorted(i.node_id for i in w.store.items) == sorted([node, "node-unknown"])
    await w.settle(agent_executor(w, bus))
    unknown = w.store.item("node-unknown")
    assert unknown.state is NodeStep.FAILED and "does not know this node" in unknown.reason
    assert agent_ledger(w, "node-unknown") == []
    assert w.store.item(node).state is NodeStep.DONE


async def test_under_approval_the_runbook_waits_for_it(world: World, bus: AgentBus) -> None:
    w = world
    node = w.rt.fleet[1].id
    break_gsp(w, node)
    await deliver_drift(w, node, RemedyPolicy.APPROVAL)
    ex = agent_executor(w, bus)
    assert not await ex.step()  # held: nothing claimable
    assert agent_ledger(w, node) == []
    async with w.store.transaction() as tx:
        assert await tx.approve_remedy(node)
        assert not await tx.approve_remedy(node)  # approved once
    await w.settle(ex)
    assert w.store.item(node).state is NodeStep.DONE


async def test_a_held_remedy_is_withdrawn_when_the_drift_resolves(world: World) -> None:
    w = world
    node = w.rt.fleet[2].id
    await deliver_drift(w, node, RemedyPolicy.APPROVAL)
    resolved = DriftResolved(node_id=node, site="site-a", stack_hash=None)
    async with w.store.transaction() as tx:
        await HANDLERS.drift_resolved(tx, make_envelope(resolved, source=INVENTORY), now=NOW)
    item = w.store.item(node)
    assert item.state is NodeStep.CANCELLED and "resolved before approval" in item.reason
    async with w.store.transaction() as tx:
        assert not await tx.approve_remedy(node)  # nothing left to approve
    assert agent_ledger(w, node) == []


def driver_drift(node: str, pin: str | None) -> DriftDetected:
    """The drift of a node read mid-install: its GSP firmware not the module's, and (``pin``)
    its driver not the pinned one; None: the mismatch is gone, only the version differs."""
    items = [
        DriftItem(
            component=Component.DRIVER,
            expected=pin or OLD,
            actual=NEW,
            kind=DriftKind.UNEXPECTED,
            severity=Severity.WARNING,
            detail="driver differs from the pin",
        )
    ]
    if pin is not None:
        items.append(drift(node).items[0].model_copy(update={"expected": pin}))
    return drift(node).model_copy(update={"items": tuple(items)})


async def deliver(w: World, data: DriftDetected) -> None:
    async with w.store.transaction() as tx:
        await Handlers(RemedyPolicy.APPROVAL).drift_detected(
            tx, make_envelope(data, source=INVENTORY), now=NOW
        )


def held_pins(w: World, node: str) -> list[tuple[NodeStep, Any]]:
    return [(i.state, i.progress.get("pin")) for i in w.store.items if i.node_id == node]


async def test_a_newer_drift_replaces_what_a_held_remedy_was_for(world: World) -> None:
    """A node read mid-install during a rollout is judged against the pin the rollout is
    replacing: a remedy held to reinstall the old branch must not wait for an approval that
    would reinstall it; the node's next drift decides (seen in the demo: 18 such remedies left
    held after a healthy rollout, one of them approved by the runbook's own scene)."""
    w = world
    node = w.rt.fleet[3].id
    await deliver(w, driver_drift(node, OLD))
    await deliver(w, driver_drift(node, OLD))  # the same drift again: the same remedy
    assert held_pins(w, node) == [(NodeStep.PENDING, OLD)]
    await deliver(w, driver_drift(node, NEW))  # judged again against the new pin
    assert held_pins(w, node) == [(NodeStep.CANCELLED, OLD), (NodeStep.PENDING, NEW)]
    await deliver(w, driver_drift(node, None))  # the mismatch is gone
    assert held_pins(w, node) == [(NodeStep.CANCELLED, OLD), (NodeStep.CANCELLED, NEW)]
    assert "the drift changed" in w.store.items[-1].reason
    assert agent_ledger(w, node) == []


async def test_the_runbook_waits_while_its_node_is_in_a_released_wave(
    world: World, bus: AgentBus
) -> None:
    w = world
    node = w.rt.fleet[3].id
    break_gsp(w, node)
    await deliver_drift(w, node)  # the remedy is first in line ...
    await _release(w, node, (Component.GPU_VBIOS,))  # ... but the node's wave is released
    ex = agent_executor(w, bus)
    # Run until the rollout's item is done; the remedy meanwhile never drains the node.
    for _ in range(400):
        update = next(i for i in w.store.items if i.kind == "update")
        remedy = next(i for i in w.store.items if i.kind == "remedy")
        if update.state is NodeStep.DONE:
            break
        assert remedy.state in {NodeStep.PENDING, NodeStep.PREFLIGHT, NodeStep.CORDONING}
        if not await ex.step():
            w.store.advance(FAST.retry_s)
    assert f"in a released wave of rollout {ROLLOUT}" in remedy.reason
    assert owned(w, node) == ["drain", "resume"]  # the rollout's drain only, so far
    await w.settle(ex)
    assert w.store.item(node).state is NodeStep.DONE  # then realigned
    assert owned(w, node) == ["drain", "resume", "drain", "resume"]


async def _release(w: World, node: str, components: tuple[Component, ...]) -> None:
    planned = RolloutPlanned(
        rollout_id=ROLLOUT,
        intent_id=uuid.uuid4(),
        stack_hash=STACK,
        change_class=ChangeClass.STANDARD,
        waves=(WavePlan(number=0, node_ids=(node,)),),
    )
    wave = WavePlanned(
        rollout_id=ROLLOUT,
        wave=0,
        node_ids=(node,),
        components=components,
        max_unavailable=1,
        failure_budget=0,
        soak_seconds=0,
    )
    planner = source_of("planner")
    async with w.store.transaction() as tx:
        await HANDLERS.rollout_planned(tx, make_envelope(planned, source=planner), now=NOW)
        await HANDLERS.wave_planned(
            tx, make_envelope(wave, source=planner, correlation_id="c1"), now=NOW
        )


async def _history(w: World, node: str) -> list[Any]:
    async with w.store.transaction() as tx:
        records = await tx.history(node, 100)
    return [r for r in records if r.step != r.outcome]


class SilentWhileRebooting:
    """The agent over NATS, unreachable for ``silent`` reads after a reboot (the node is down
    while it boots, as a real one is for minutes)."""

    def __init__(self, agent: NatsNodeAgent, silent: int) -> None:
        self.agent, self.silent, self.rebooted = agent, silent, False

    async def state(self, order: AgentOrder) -> AgentState:
        if self.rebooted and self.silent > 0:
            self.silent -= 1
            raise AgentUnavailable(f"no agent of {order.node_id} listens: is it running?")
        return await self.agent.state(order)

    async def install_driver(self, order: AgentOrder, version: str) -> AgentState:
        return await self.agent.install_driver(order, version)

    async def rebuild_dkms(self, order: AgentOrder) -> AgentState:
        return await self.agent.rebuild_dkms(order)

    async def reboot(self, order: AgentOrder) -> AgentState:
        self.rebooted = True
        return await self.agent.reboot(order)


async def test_a_node_silent_while_it_reboots_is_waited_for_not_given_up(
    world: World, bus: AgentBus
) -> None:
    w = world
    node = w.rt.fleet[0].id
    break_gsp(w, node)
    await deliver_drift(w, node)
    ex = agent_executor(w, bus)
    assert isinstance(ex.inband.agent, NatsNodeAgent)
    # More silent reads than the step may fail in a row: waiting is not failing.
    ex.inband.agent = SilentWhileRebooting(ex.inband.agent, silent=FAST.max_errors + 5)
    await w.settle(ex)
    item = w.store.item(node)
    assert item.state is NodeStep.DONE, item.reason
    waits = [r for r in await _all_history(w, node) if r.reason.startswith("rebooting:")]
    assert len(waits) == FAST.max_errors + 5
    assert agent_ledger(w, node) == ["install-driver", "reboot"]


async def test_a_node_that_does_not_come_back_from_its_reboot_is_quarantined(
    world: World,
    bus: AgentBus,
) -> None:
    w = world
    node = w.rt.fleet[1].id
    break_gsp(w, node)
    await deliver_drift(w, node)
    ex = agent_executor(w, bus)
    assert isinstance(ex.inband.agent, NatsNodeAgent)
    ex.inband.agent = SilentWhileRebooting(ex.inband.agent, silent=10**6)
    ex.inband.reboot_deadline_s = 0.0  # the store's clock stands still; any wall time is late
    await w.settle(ex)
    item = w.store.item(node)
    assert item.state is NodeStep.QUARANTINED and "did not come back" in item.reason
    assert w.rt.scheduler.node(node).drain is not None  # kept out of service


async def _all_history(w: World, node: str) -> list[Any]:
    async with w.store.transaction() as tx:
        return await tx.history(node, 1000)
