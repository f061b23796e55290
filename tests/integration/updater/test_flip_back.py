"""A/B flip-back after a tripped gate, on the simulator: the canary node that activated the
image runs its previous image again, read back and reported ``device.rolled_back`` with the
mechanism used, drained and given back by Lockstep; a node that activated nothing, or whose BMC
reads the previous version still, gets no call; a flip-back is sent once. Per dialect: Supermicro
runs its backup bank (``Links.ActiveSoftwareImage``, then ``Manager.Reset``); a profile that keeps
no previous image to run (NVIDIA GB200, the simulator's own dialect) re-flashes the previous
attested image, the downgrade forced (``ForceUpdate``), then runs it with the profile's own
activation, only where the approved plan says so (GB200) and an attested bundle holds that image;
otherwise it is refused before any drain or write."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from lockstep_common.envelope import make_envelope, source_of
from lockstep_common.events.v1 import DeviceRolledBack, GateTripped, WaveCompleted
from lockstep_common.vocabulary import Component, GateVerdict, RollbackMechanism
from lockstep_redfish.profile import BmcProfile, Downgrade, DowngradeMode, profile_named
from lockstep_sim import inventory as sim_inventory
from lockstep_sim.faults import Fault, FaultPlan
from lockstep_sim.options import OPERATOR_USERNAME, SimOptions
from lockstep_sim.runtime import FleetRuntime
from lockstep_updater.domain.progress import ComponentPlan, UpdateProgress, document
from lockstep_updater.domain.remedy import RemedyPolicy
from lockstep_updater.domain.steps import NodeStep
from lockstep_updater.executor import Executor
from lockstep_updater.handlers import Handlers
from lockstep_updater.ports import OWNER
from lockstep_updater.steps import rollback as rollback_step
from lockstep_updater.store import ROLLBACK
from lockstep_updater.testing.memory_store import MemoryStore
from lockstep_updater.testing.memory_tables import Item
from lockstep_updater.testing.sim_fleet import SimFacts, sim_executor
from tests.integration.sim.pldm_fixtures import GB200_GPU, NEW_GPU_VERSION, package_for
from tests.integration.updater.conftest import ENV, FAST, PUSH, ROLLOUT, STACK, World, attest_image
from tests.integration.updater.test_executor_sim import nodes_of, plan_and_release

HANDLERS = Handlers(RemedyPolicy.AUTOMATIC)
NOW = datetime(2026, 3, 2, 12, tzinfo=UTC)  # handlers are given the time

pytestmark = pytest.mark.integration
PREVIOUS = "c" * 64  # the stack the fleet ran before: its bundle holds the previous images


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


async def attest_previous(w: World, version: str) -> str:
    """Record the attested bundle holding the GPU image at ``version`` (the bundle the node ran
    before the rollout, as the updater records every ``bundle.attested``); its SHA-384."""
    where = w.bundle.parent / "previous"
    where.mkdir(exist_ok=True)
    image = package_for(GB200_GPU, version)
    gpu = attest_image(where, "gpu.fwpkg", image, Component.GPU_VBIOS, version)
    async with w.store.transaction() as tx:
        await tx.record_bundle(PREVIOUS, str(where), (gpu,))
    return gpu.sha384


def pushes_after(w: World, node: str, seq: int) -> list[tuple[list[str], bool, bool, str]]:
    """The accepted pushes after ledger entry ``seq``: targets, stage, force, image SHA-384."""
    return [
        (e["targets"], e["stage"], e["force"], e["sha384"])
        for e in w.pushes(node)
        if e["seq"] > seq
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
    (previous,) = old
    sha384 = await attest_previous(w, previous)
    forward = len(w.rt.simulator.bmc(flashed).ledger)
    untouched = len(w.rt.simulator.bmc(skipped).ledger)
    await trip(w, flashed)
    await w.settle()

    rollbacks = {i.node_id: i for i in w.store.items if i.kind == ROLLBACK}
    assert rollbacks[flashed].state is NodeStep.DONE, rollbacks[flashed].reason
    assert w.gpu_versions(flashed) == old  # the previous image runs again
    members = sorted(m for m in w.rt.simulator.bmc(flashed).node.components if "FW_GPU" in m)
    # The simulator's own dialect (profile lockstep-sim): the previous attested image pushed
    # once, staged and forced, then UpdateService.Activate of the members it wrote.
    writes = [
        (e["action"], e.get("targets"), e.get("force"), e.get("sha384"))
        for e in w.rt.simulator.bmc(flashed).ledger[forward:]
        if e["action"] not in {"session_create", "session_delete"}
    ]
    paths = [f"{FW}/{m}" for m in members]
    assert writes == [
        (PUSH, paths, True, sha384),
        ("UpdateService.Activate", members, None, None),
    ], writes
    assert [e.action for e in w.rt.scheduler.ledger if e.node_id == flashed and e.by == OWNER] == [
        "drain",
        "resume",
        "drain",
        "resume",
    ]
    (rolled,) = [e for e in w.store.events.events if isinstance(e, DeviceRolledBack)]
    assert (rolled.node_id, rolled.component) == (flashed, Component.GPU_VBIOS)
    assert rolled.mechanism is RollbackMechanism.REFLASH
    assert (rolled.from_version, {rolled.to_version}) == (NEW_GPU_VERSION, old)

    # The node whose update activated nothing: its flip-back ends at once, no call sent.
    assert rollbacks[skipped].state is NodeStep.CANCELLED
    assert "nothing was activated" in rollbacks[skipped].reason
    assert w.rt.simulator.bmc(skipped).ledger[untouched:] == []
    drain = w.rt.scheduler.node(skipped).drain
    assert drain is not None and drain.by == "ops"
    # The wave completed once, from its updates; flip-backs are not counted in it.
    assert len([e for e in w.store.events.events if isinstance(e, WaveCompleted)]) == 1

    await trip(w, flashed)  # the same verdict again: nothing more to do
    await w.settle()
    assert len([i for i in w.store.items if i.kind == ROLLBACK]) == 2
    assert len(pushes_after(w, flashed, forward)) == 1


async def test_a_flip_back_waits_for_the_update_in_flight(world: World) -> None:
    w = world
    (node,) = nodes_of(w, 1)
    (old,) = w.gpu_versions(node)
    await attest_previous(w, old)
    await plan_and_release(w, (node,))
    ex = w.executor(one_step_a_claim=True)
    while w.store.item(node).state is not NodeStep.AWAITING_BMC:  # activated, not verified
        assert await ex.step()
    await trip(w, node)
    await w.settle(ex)
    update = next(i for i in w.store.items if i.node_id == node and i.kind != ROLLBACK)
    assert update.state is NodeStep.DONE  # in-flight device steps finish
    assert w.store.item(node).state is NodeStep.DONE and w.gpu_versions(node) == {old}


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


async def updated(
    w: World,
    node: str,
    name: str,
    member: str,
    old: str,
    new: str,
    *,
    reflash: tuple[Component, ...] = (),
) -> None:
    """The node's update ended having activated ``name`` (``member`` from ``old`` to ``new``),
    recorded as the update does (activate_sent, the plan staged and verified); ``reflash``: what
    the approved plan lets a flip-back re-flash."""
    await plan_and_release(w, (node,), components=(Component(name),), reflash=reflash)
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


async def gb200_activated(
    dialect_world: Callable[[str, str], Awaitable[World]],
    *,
    dialect: str = "nvidia-gb200-nvl",
    reflash: tuple[Component, ...] = (Component.GPU_VBIOS,),
    attested: bool = True,
) -> tuple[World, str, Any, str]:
    """A GB200 tray whose update activated a new GPU image (background copy done: both banks
    hold it), its rollout's plan saying ``reflash``, the previous image attested or not: the
    world, the node, its GPU member and the version before."""
    w = await dialect_world(dialect, "gb200")
    node = w.rt.fleet[0].id
    gpu = w.rt.simulator.bmc(node).node.components["HGX_FW_GPU_0"]
    old = gpu.version
    gpu.version = gpu.inactive_version = NEW_GPU_VERSION
    if attested:
        await attest_previous(w, old)
    await updated(w, node, "gpu_vbios", "HGX_FW_GPU_0", old, NEW_GPU_VERSION, reflash=reflash)
    await trip(w, node)
    return w, node, gpu, old


def refused_untouched(w: World, node: str, gpu: Any) -> str:
    """The flip-back failed with nothing written to the BMC and no drain; its reason."""
    flip = next(i for i in w.store.items if i.kind == ROLLBACK)
    assert flip.state is NodeStep.FAILED
    assert writes(w, node) == []
    assert [e for e in w.rt.scheduler.ledger if e.node_id == node and e.by == OWNER] == []
    assert gpu.version == NEW_GPU_VERSION
    assert not [e for e in w.store.events.events if isinstance(e, DeviceRolledBack)]
    return flip.reason


async def test_a_gb200_flip_back_re_flashes_the_previous_image_forced_then_power_cycles(
    dialect_world: Callable[[str, str], Awaitable[World]],
) -> None:
    """NVIDIA keeps no previous image to run (CommitImage/background copy overwrite it): the
    approved plan said a tripped gate re-flashes the GPU, so the previous attested image is
    pushed once with ``ForceUpdate`` as the profile pushes (multipart, Immediate), then the
    profile's one reset (the tray's power cycle) runs it, read back and reported."""
    w, node, gpu, old = await gb200_activated(dialect_world)
    sha384 = hashlib.sha384(package_for(GB200_GPU, old)).hexdigest()
    await w.settle()

    flip = next(i for i in w.store.items if i.kind == ROLLBACK)
    assert flip.state is NodeStep.DONE, flip.reason
    assert gpu.version == old
    assert writes(w, node) == [
        (PUSH, [f"{FW}/HGX_FW_GPU_0"]),
        ("Chassis.Reset", "PowerCycle"),
    ]
    (push,) = w.pushes(node)
    assert (push["force"], push["stage"], push["sha384"]) == (True, False, sha384)
    (rolled,) = [e for e in w.store.events.events if isinstance(e, DeviceRolledBack)]
    assert (rolled.component, rolled.from_version, rolled.to_version, rolled.mechanism) == (
        Component.GPU_VBIOS,
        NEW_GPU_VERSION,
        old,
        RollbackMechanism.REFLASH,
    )
    assert [e.action for e in w.rt.scheduler.ledger if e.node_id == node and e.by == OWNER] == [
        "drain",
        "resume",
    ]


async def test_a_gb200_flip_back_the_approved_plan_does_not_say_is_refused_before_any_drain(
    dialect_world: Callable[[str, str], Awaitable[World]],
) -> None:
    """A forced downgrade needs the approver's signature over a plan that says so: a wave
    released without ``reflash`` (an older plan, or a planner that did not know the BMC) gets
    no re-flash, even with the previous image attested."""
    w, node, gpu, old = await gb200_activated(dialect_world, reflash=())
    await w.settle()
    assert refused_untouched(w, node, gpu) == (
        "one-way: profile nvidia-gb200-nvl keeps no previous image to run; flipping back is a "
        f"re-flash of the previous attested image (gpu_vbios {old}), a forced downgrade the "
        f"approved plan of {ROLLOUT} does not say for gpu_vbios: re-flash by hand, or plan with "
        "LOCKSTEP_PLANNER_BMC_PROFILES naming this BMC's profile"
    )


async def test_a_re_flash_without_an_attested_previous_image_is_refused_before_any_drain(
    dialect_world: Callable[[str, str], Awaitable[World]],
) -> None:
    w, node, gpu, old = await gb200_activated(dialect_world, attested=False)
    await w.settle()
    assert refused_untouched(w, node, gpu) == (
        "one-way: profile nvidia-gb200-nvl keeps no previous image to run; flipping back is a "
        f"re-flash of the previous attested image (gpu_vbios {old}): no attested bundle holds "
        f"gpu_vbios {old} for profile gb200; nothing was changed"
    )


def no_downgrade(profile: str, old: str) -> str:
    """The one line a GPU's re-flash gets from a profile that allows no downgrade."""
    return (
        f"one-way: profile {profile} keeps no previous image to run; flipping back is a "
        f"re-flash of the previous attested image (gpu_vbios {old}), a downgrade: profile "
        f"{profile} allows no downgrade; re-flash by hand"
    )


async def test_a_re_flash_on_a_profile_that_forbids_downgrades_is_refused_before_any_drain(
    dialect_world: Callable[[str, str], Awaitable[World]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A profile whose ``[downgrade] mode`` is ``refused`` (Supermicro's: its capture offers no
    way) gets no re-flash, even with the plan saying so and the previous image attested."""
    generic = profile_named("dmtf-generic")
    forbids = generic.model_copy(update={"downgrade": Downgrade(mode=DowngradeMode.REFUSED)})

    async def chosen(bmc: Any) -> BmcProfile:
        return forbids

    monkeypatch.setattr(rollback_step, "profile_of", chosen)
    w, node, gpu, old = await gb200_activated(dialect_world, dialect="dmtf-generic")
    await w.settle()
    assert refused_untouched(w, node, gpu) == no_downgrade("dmtf-generic", old)


async def test_a_gpu_behind_a_supermicro_bmc_is_a_refused_re_flash_not_a_backup_search(
    dialect_world: Callable[[str, str], Awaitable[World]],
) -> None:
    """Supermicro's backup bank keeps the BMC's and the BIOS's previous images only: a GPU's
    flip-back there is a re-flash, as the planner ordered it, which the profile refuses (no way
    to downgrade), before any drain or write."""
    w, node, gpu, old = await gb200_activated(dialect_world, dialect="supermicro-x13")
    await w.settle()
    assert refused_untouched(w, node, gpu) == no_downgrade("supermicro-x13", old)


async def test_a_dmtf_re_flash_sends_the_older_image_as_any_update_then_resets(
    dialect_world: Callable[[str, str], Awaitable[World]],
) -> None:
    """DSP0268 has no force flag: on the standard alone the previous attested image is pushed
    as an ordinary update (no ``ForceUpdate``), under the plan's signed ``reflash``, then run by
    the profile's own activation, read back and reported."""
    w, node, gpu, old = await gb200_activated(dialect_world, dialect="dmtf-generic")
    await w.settle()

    flip = next(i for i in w.store.items if i.kind == ROLLBACK)
    assert flip.state is NodeStep.DONE, flip.reason
    assert gpu.version == old
    assert writes(w, node) == [
        (PUSH, [f"{FW}/HGX_FW_GPU_0"]),
        ("ComputerSystem.Reset", "GracefulRestart"),
    ]
    (push,) = [e for e in w.rt.simulator.bmc(node).ledger if e["action"] == PUSH]
    assert (push["status"], push["force"]) == (204, False)  # DSP0266: synchronous, done
    (rolled,) = [e for e in w.store.events.events if isinstance(e, DeviceRolledBack)]
    assert rolled.mechanism is RollbackMechanism.REFLASH and rolled.to_version == old


@pytest.mark.parametrize(
    ("fault", "ends", "why"),
    [
        # The write refused (500 ApplyFailed, DSP0266): before the drain, nothing changed.
        (Fault("failed_flash"), NodeStep.FAILED, "HTTP 500"),
        # Taken and reset, but the version did not move: the read-back says so.
        (Fault("wrong_version", version=NEW_GPU_VERSION), NodeStep.QUARANTINED, "not verified"),
    ],
    ids=["refused", "not-moved"],
)
async def test_a_dmtf_bmc_that_does_not_take_the_older_image_is_never_reported_rolled_back(
    dialect_world: Callable[[str, str], Awaitable[World]], fault: Fault, ends: NodeStep, why: str
) -> None:
    """Sent as any update, the downgrade is the BMC's to take, and the BMC's answers decide:
    one that refuses the write ends the flip-back with that reason before any drain; one whose
    version does not move after the reset ends quarantined; neither is reported rolled back."""
    w, node, gpu, _ = await gb200_activated(dialect_world, dialect="dmtf-generic")
    targeted = dataclasses.replace(fault, nodes=(node,))
    w.rt.simulator.set_faults(FaultPlan(faults=(targeted,)))
    await w.settle()

    flip = next(i for i in w.store.items if i.kind == ROLLBACK)
    assert flip.state is ends and why in flip.reason, (flip.state, flip.reason)
    assert gpu.version == NEW_GPU_VERSION
    assert not [e for e in w.store.events.events if isinstance(e, DeviceRolledBack)]


async def test_a_re_flash_push_recorded_as_sent_is_never_sent_again(
    dialect_world: Callable[[str, str], Awaitable[World]],
) -> None:
    """The worker died after the push was accepted and before it recorded the push's task or
    ended the step: the next run finds the push recorded as sent, reads the member (the image
    waits in the other bank) instead of pushing again, and the flip-back goes on: one push,
    one reset."""
    w, node, gpu, old = await gb200_activated(dialect_world)
    ex = w.executor(one_step_a_claim=True)
    flip = next(i for i in w.store.items if i.kind == ROLLBACK)
    while flip.state is not NodeStep.CORDONING:  # staged: pushed, its task recorded
        assert await ex.step()
    plan = flip.progress["components"]["gpu_vbios"]
    assert plan["sent"] is True and len(w.pushes(node)) == 1
    flip.state, plan["task"], plan["staged"] = NodeStep.STAGING, None, False  # as if died
    await w.settle()

    assert flip.state is NodeStep.DONE, flip.reason
    assert gpu.version == old
    assert writes(w, node) == [
        (PUSH, [f"{FW}/HGX_FW_GPU_0"]),
        ("Chassis.Reset", "PowerCycle"),
    ]


# The activation each dialect's profile sends for a re-flash (``lockstep``: the simulator's own,
# Stage then Activate).
RESETS = {
    "nvidia-gb200-nvl": "Chassis.Reset",
    "nvidia-hgx": "ComputerSystem.Reset",
    "lockstep": "UpdateService.Activate",
}


@pytest.mark.parametrize(
    ("dialect", "tells"), [*[(d, True) for d in RESETS], ("nvidia-gb200-nvl", False)]
)
async def test_a_re_flash_whose_activation_was_recorded_but_never_sent_asks_the_bmc(
    dialect_world: Callable[[str, str], Awaitable[World]],
    monkeypatch: pytest.MonkeyPatch,
    dialect: str,
    tells: bool,
) -> None:
    """Issue 29 item 6 on a re-flash: the worker recorded the reset as being sent and died
    before sending it. Where the BMC can tell (the previous image written and ``Staged``, the
    image that tripped the gate still running, no task, for as long as a reset takes), the
    reset is sent now, once, and the node is flipped back; where it cannot (no ``Staged``), the
    read-back decides and the unmoved version quarantines it."""
    if not tells:
        real = sim_inventory.member_doc

        def silent(component: Any) -> dict[str, Any]:
            doc = real(component)
            doc.pop("Staged", None)
            return doc

        monkeypatch.setattr(sim_inventory, "member_doc", silent)
    w, node, gpu, old = await gb200_activated(dialect_world, dialect=dialect)
    ex = w.executor(one_step_a_claim=True)
    flip = next(i for i in w.store.items if i.kind == ROLLBACK)
    while flip.state is not NodeStep.ACTIVATING:  # pushed and drained, the reset not yet sent
        assert await ex.step()
    flip.progress["activate_sent"] = True  # what the guard's check committed before the send
    await w.settle(asking(w))

    resets = [e for e in w.rt.simulator.bmc(node).ledger if e["action"] == RESETS[dialect]]
    ended = w.store.item(node)  # the node's latest item: its flip-back
    if tells:
        assert ended.state is NodeStep.DONE, ended.reason
        assert gpu.version == old and len(resets) == 1
        (rolled,) = [e for e in w.store.events.events if isinstance(e, DeviceRolledBack)]
        assert rolled.mechanism is RollbackMechanism.REFLASH
    else:
        assert ended.state is NodeStep.QUARANTINED and "not verified" in ended.reason, ended.reason
        assert gpu.version == NEW_GPU_VERSION and resets == []


def asking(w: World) -> Executor:
    """The restarted updater, asking the BMC for a reset's time of 0.3 s (``reachable_s``)."""
    policy = dataclasses.replace(FAST, update=dataclasses.replace(FAST.update, reachable_s=0.3))
    ex = sim_executor(w.rt, w.store, w.facts, w.bundle, policy, ENV)
    w.executors.append(ex)
    return ex


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


@dataclass(frozen=True)
class SupermicroTrip:
    """A Supermicro node whose BMC update was activated, its gate tripped, its flip-back run."""

    w: World
    node: str
    old: str  # the BMC's version before the update
    flip: Item  # the flip-back's work item


async def supermicro_tripped(
    dialect_world: Callable[[str, str], Awaitable[World]], backup: str | None = None
) -> SupermicroTrip:
    """The update to ``NEW_BMC`` activated, the backup bank holding ``backup`` (None: the
    previous image), then a tripped gate and its flip-back run to its end."""
    w = await dialect_world("supermicro-x13", "hgx-h100")
    node = w.rt.fleet[0].id
    bmc = w.rt.simulator.bmc(node).node.components["BMC"]
    old = bmc.version
    bmc.version, bmc.inactive_version = NEW_BMC, backup or old  # what the update left
    await updated(w, node, "bmc", "BMC", old, NEW_BMC)
    await trip(w, node)
    await w.settle()
    return SupermicroTrip(w, node, old, next(i for i in w.store.items if i.kind == ROLLBACK))


async def test_a_supermicro_backup_without_the_previous_image_fails_before_any_drain_or_write(
    dialect_world: Callable[[str, str], Awaitable[World]],
) -> None:
    tripped = await supermicro_tripped(dialect_world, "1.0.0")  # the backup: another image
    w, node, old, flip = tripped.w, tripped.node, tripped.old, tripped.flip
    assert flip.state is NodeStep.FAILED
    assert flip.reason == (
        f"flip back: {FW}/BMC: no inactive image at {old} in its device's SoftwareImages "
        "(profile supermicro-x13); nothing was changed"
    )
    assert writes(w, node) == []
    assert [e for e in w.rt.scheduler.ledger if e.node_id == node and e.by == OWNER] == []
    assert w.rt.simulator.bmc(node).node.components["BMC"].version == NEW_BMC


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
