"""A/B flip-back after a tripped gate, on the simulator: the canary node that activated the
image runs its previous bank again, read back and reported ``device.rolled_back`` with the
mechanism used, drained and given back by Lockstep; a node that activated nothing, or whose BMC
reads the previous version still, gets no call; a flip-back is sent once. Per dialect: Supermicro
runs its backup bank (``Links.ActiveSoftwareImage``, then ``Manager.Reset``); a profile that keeps
no previous image to run (NVIDIA GB200) is refused as one-way before any drain or write."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from lockstep_common.envelope import make_envelope, source_of
from lockstep_common.events.v1 import DeviceRolledBack, GateTripped, WaveCompleted
from lockstep_common.vocabulary import Component, GateVerdict, RollbackMechanism
from lockstep_sim.options import OPERATOR_USERNAME, SimOptions
from lockstep_sim.runtime import FleetRuntime
from lockstep_updater.domain.progress import ComponentPlan, UpdateProgress, document
from lockstep_updater.domain.remedy import RemedyPolicy
from lockstep_updater.domain.steps import NodeStep
from lockstep_updater.handlers import Handlers
from lockstep_updater.ports import OWNER
from lockstep_updater.store import ROLLBACK
from lockstep_updater.testing.memory_store import MemoryStore
from lockstep_updater.testing.sim_fleet import SimFacts
from tests.integration.sim.pldm_fixtures import NEW_GPU_VERSION
from tests.integration.updater.conftest import ROLLOUT, STACK, World
from tests.integration.updater.test_executor_sim import nodes_of, plan_and_release

HANDLERS = Handlers(RemedyPolicy.AUTOMATIC)
NOW = datetime(2026, 3, 2, 12, tzinfo=UTC)  # handlers are given the time

pytestmark = pytest.mark.integration
SWITCH = "LockstepSim.SwitchBank"  # the BMC ledger's action for the OEM bank switch


async def trip(w: World, *offending: str) -> None:
    tripped = GateTripped(
        rollout_id=ROLLOUT,
        wave=0,
        verdict=GateVerdict.TRIPPED,
        evidence=(),
        offending_nodes=offending,
    )
    async with w.store.transaction() as tx:
        await HANDLERS.gate_tripped(
            tx, make_envelope(tripped, source=source_of("healthgate")), now=NOW
        )


def may_configure_manager(w: World, node: str) -> None:
    """The flip-back's account holds ConfigureManager, which DSP8011 gives the PATCH of a
    Manager's ``Links.ActiveSoftwareImage`` and ``Manager.Reset`` (the simulator's Administrator
    role; without it the flip-back is refused in preflight: test_flip_back_privilege.py)."""
    account = w.rt.simulator.bmc(node).accounts.by_name(OPERATOR_USERNAME)
    assert account is not None
    account.role = "Administrator"


def switches(w: World, node: str) -> list[str]:
    return [
        e["targets"][0]
        for e in w.rt.simulator.bmc(node).ledger
        if e["action"] == SWITCH and e.get("status") == 202
    ]


async def test_a_tripped_gate_flips_the_activated_canary_back_and_leaves_the_rest(
    world: World,
) -> None:
    w = world
    flashed, skipped = nodes_of(w, 2)
    old = w.gpu_versions(flashed)
    w.rt.scheduler.drain(skipped, "hardware ticket 4711", "ops")  # its update ends untouched
    await plan_and_release(w, (flashed, skipped), max_unavailable=2)
    await w.settle()
    assert w.gpu_versions(flashed) == {NEW_GPU_VERSION}
    await trip(w, flashed)
    await w.settle()

    rollbacks = {i.node_id: i for i in w.store.items if i.kind == ROLLBACK}
    assert rollbacks[flashed].state is NodeStep.DONE
    assert w.gpu_versions(flashed) == old  # the previous bank runs again
    members = sorted(m for m in w.rt.simulator.bmc(flashed).node.components if "FW_GPU" in m)
    assert sorted(switches(w, flashed)) == members  # one switch per GPU, sent once
    assert [e.action for e in w.rt.scheduler.ledger if e.node_id == flashed and e.by == OWNER] == [
        "drain",
        "resume",
        "drain",
        "resume",
    ]
    (rolled,) = [e for e in w.store.events.events if isinstance(e, DeviceRolledBack)]
    assert (rolled.node_id, rolled.component) == (flashed, Component.GPU_VBIOS)
    # The simulator's own dialect matches no vendor profile: only its OEM action runs it.
    assert rolled.mechanism is RollbackMechanism.SIMULATOR_SWITCH_BANK
    assert (rolled.from_version, {rolled.to_version}) == (NEW_GPU_VERSION, old)

    # The node whose update activated nothing: its flip-back ends at once, no call sent.
    assert rollbacks[skipped].state is NodeStep.CANCELLED
    assert "nothing was activated" in rollbacks[skipped].reason
    assert switches(w, skipped) == []
    drain = w.rt.scheduler.node(skipped).drain
    assert drain is not None and drain.by == "ops"
    # The wave completed once, from its updates; flip-backs are not counted in it.
    assert len([e for e in w.store.events.events if isinstance(e, WaveCompleted)]) == 1

    await trip(w, flashed)  # the same verdict again: nothing more to do
    await w.settle()
    assert len([i for i in w.store.items if i.kind == ROLLBACK]) == 2
    assert sorted(switches(w, flashed)) == members


async def test_a_flip_back_waits_for_the_update_in_flight(world: World) -> None:
    w = world
    (node,) = nodes_of(w, 1)
    await plan_and_release(w, (node,))
    ex = w.executor(one_step_a_claim=True)
    while w.store.item(node).state is not NodeStep.AWAITING_BMC:  # activated, not verified
        assert await ex.step()
    await trip(w, node)
    await w.settle(ex)
    update = next(i for i in w.store.items if i.node_id == node and i.kind != ROLLBACK)
    assert update.state is NodeStep.DONE  # in-flight device steps finish
    assert w.store.item(node).state is NodeStep.DONE and w.gpu_versions(node) != {NEW_GPU_VERSION}


FW = "/redfish/v1/UpdateService/FirmwareInventory"
NEW_BMC = "99.99.99"


@pytest.fixture
async def dialect_world(tmp_path: Path) -> AsyncIterator[Callable[[str, str], Awaitable[World]]]:
    """A world whose BMCs speak ``dialect`` on ``hardware`` (the forward path on a vendor
    dialect is the profile-driven update's; these tests start from the end it records)."""
    made: list[World] = []

    async def make(dialect: str, hardware: str) -> World:
        rt = FleetRuntime(
            SimOptions(
                2,
                hardware,
                dialect=dialect,
                time_scale=0.002,
                host_base=f"127.76.{len(made)}.1",
                port=0,
            ),
            scheduler_port=0,
        )
        await rt.start()
        store = MemoryStore()
        async with store.transaction() as tx:  # the rollout's bundle (nothing pushed from it)
            await tx.record_bundle(STACK, str(tmp_path), ())
        w = World(rt, store, SimFacts(rt, credentials="SIMBMC"), tmp_path, gpu=None)  # type: ignore[arg-type]
        made.append(w)
        return w

    yield make
    for w in made:
        for ex in w.executors:
            await ex.close()
        await w.rt.stop()


async def updated(w: World, node: str, name: str, member: str, old: str, new: str) -> None:
    """The node's update ended having activated ``name`` (``member`` from ``old`` to ``new``),
    recorded as the update does (activate_sent, the plan staged and verified)."""
    await plan_and_release(w, (node,), components=(Component(name),))
    item = w.store.item(node)
    plan = ComponentPlan(
        version=new,
        banks="ab",
        targets=[f"{FW}/{member}"],
        before={f"{FW}/{member}": old},
        staged=True,
        done=True,
    )
    progress = UpdateProgress(activate_sent=True, components={name: plan})
    item.state, item.progress = NodeStep.DONE, document(progress)


def writes(w: World, node: str) -> list[tuple[str, Any]]:
    """The BMC ledger's writes (sessions aside): action and what it changed."""
    return [
        (e["action"], e.get("links") or e.get("reset_type") or e.get("targets"))
        for e in w.rt.simulator.bmc(node).ledger
        if e["action"] not in {"session_create", "session_delete"}
    ]


async def test_a_supermicro_flip_back_runs_the_backup_bank_and_says_so(
    dialect_world: Callable[[str, str], Awaitable[World]],
) -> None:
    w = await dialect_world("supermicro-x13", "hgx-h100")
    node = w.rt.fleet[0].id
    bmc = w.rt.simulator.bmc(node).node.components["BMC"]
    old = bmc.version
    bmc.version, bmc.inactive_version = NEW_BMC, old  # what the activated update left
    may_configure_manager(w, node)
    await updated(w, node, "bmc", "BMC", old, NEW_BMC)
    await trip(w, node)
    await w.settle()

    flip = next(i for i in w.store.items if i.kind == ROLLBACK)
    assert flip.state is NodeStep.DONE, flip.reason
    assert bmc.version == old and bmc.inactive_version == NEW_BMC
    chosen = {"ActiveSoftwareImage": {"@odata.id": f"{FW}/Backup_BMC"}}
    assert writes(w, node) == [("patch", chosen), ("Manager.Reset", "GracefulRestart")]
    (rolled,) = [e for e in w.store.events.events if isinstance(e, DeviceRolledBack)]
    assert (rolled.component, rolled.from_version, rolled.to_version) == (
        Component.BMC,
        NEW_BMC,
        old,
    )
    assert rolled.mechanism is RollbackMechanism.INACTIVE_IMAGE
    assert [e.action for e in w.rt.scheduler.ledger if e.node_id == node and e.by == OWNER] == [
        "drain",
        "resume",
    ]


async def test_a_gb200_flip_back_is_one_way_and_refused_before_any_drain_or_write(
    dialect_world: Callable[[str, str], Awaitable[World]],
) -> None:
    w = await dialect_world("nvidia-gb200-nvl", "gb200")
    node = w.rt.fleet[0].id
    gpu = w.rt.simulator.bmc(node).node.components["HGX_FW_GPU_0"]
    old = gpu.version
    gpu.version = gpu.inactive_version = NEW_GPU_VERSION  # activated; background copy done
    await updated(w, node, "gpu_vbios", "HGX_FW_GPU_0", old, NEW_GPU_VERSION)
    await trip(w, node)
    await w.settle()

    flip = next(i for i in w.store.items if i.kind == ROLLBACK)
    assert flip.state is NodeStep.FAILED
    assert flip.reason.startswith(
        "one-way: profile nvidia-gb200-nvl keeps no previous image to run; flipping back is a "
        f"re-flash of the previous attested image (gpu_vbios {old})"
    )
    assert writes(w, node) == []
    assert [e for e in w.rt.scheduler.ledger if e.node_id == node and e.by == OWNER] == []
    assert gpu.version == NEW_GPU_VERSION


async def test_a_flip_back_the_bmc_shows_was_never_activated_writes_nothing(
    world: World,
) -> None:
    """A worker recorded the activation as being sent and died before sending it: the BMC
    still runs the previous images, so the flip-back ends at once without a write or a drain
    (issue 29, item 6)."""
    w = world
    (node,) = nodes_of(w, 1)
    old = next(iter(w.gpu_versions(node)))
    await updated(w, node, "gpu_vbios", "HGX_FW_GPU_0", old, NEW_GPU_VERSION)
    await trip(w, node)
    await w.settle()

    flip = next(i for i in w.store.items if i.kind == ROLLBACK)
    assert flip.state is NodeStep.CANCELLED
    assert "reads every activated device at its previous version" in flip.reason
    assert writes(w, node) == []
    assert [e for e in w.rt.scheduler.ledger if e.node_id == node and e.by == OWNER] == []
    assert not [e for e in w.store.events.events if isinstance(e, DeviceRolledBack)]


async def test_a_supermicro_backup_without_the_previous_image_fails_before_any_drain_or_write(
    dialect_world: Callable[[str, str], Awaitable[World]],
) -> None:
    w = await dialect_world("supermicro-x13", "hgx-h100")
    node = w.rt.fleet[0].id
    bmc = w.rt.simulator.bmc(node).node.components["BMC"]
    old = bmc.version
    bmc.version, bmc.inactive_version = NEW_BMC, "1.0.0"  # the backup holds another image
    await updated(w, node, "bmc", "BMC", old, NEW_BMC)
    await trip(w, node)
    await w.settle()

    flip = next(i for i in w.store.items if i.kind == ROLLBACK)
    assert flip.state is NodeStep.FAILED
    assert flip.reason == (
        f"flip back: {FW}/BMC: no inactive image at {old} in its device's SoftwareImages "
        "(profile supermicro-x13); nothing was changed"
    )
    assert writes(w, node) == []
    assert [e for e in w.rt.scheduler.ledger if e.node_id == node and e.by == OWNER] == []
    assert bmc.version == NEW_BMC


async def test_a_supermicro_flip_back_recorded_as_sent_but_never_sent_is_resent_once_asked(
    dialect_world: Callable[[str, str], Awaitable[World]],
) -> None:
    """A worker recorded the flip-back's write and died before sending it (issue 29, item 6):
    the next run asks the BMC (its Manager still names the running image, the version has not
    moved), sends the PATCH and the reset once, and the node ends flipped back, not
    quarantined."""
    w = await dialect_world("supermicro-x13", "hgx-h100")
    node = w.rt.fleet[0].id
    bmc = w.rt.simulator.bmc(node).node.components["BMC"]
    old = bmc.version
    bmc.version, bmc.inactive_version = NEW_BMC, old
    may_configure_manager(w, node)
    await updated(w, node, "bmc", "BMC", old, NEW_BMC)
    await trip(w, node)
    ex = w.executor(one_step_a_claim=True)
    flip = next(i for i in w.store.items if i.kind == ROLLBACK)
    while flip.state is not NodeStep.ACTIVATING:
        assert await ex.step()
    flip.progress["activate_sent"] = True  # what the guard's check committed before the send
    await w.settle()

    ended = w.store.item(node)  # the node's latest item: its flip-back
    assert ended.kind == ROLLBACK and ended.state is NodeStep.DONE, ended.reason
    assert bmc.version == old
    chosen = {"ActiveSoftwareImage": {"@odata.id": f"{FW}/Backup_BMC"}}
    assert writes(w, node) == [("patch", chosen), ("Manager.Reset", "GracefulRestart")]
