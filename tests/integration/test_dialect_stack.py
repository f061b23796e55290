"""One rollout per shipped Redfish dialect through the whole stack (issue 29, "Done means"):
attest, inventory, planner, updater and healthgate over a simulated fleet whose BMCs speak the
dialect (``running_stack(dialect=...)``), the planner and the updater told its BMC profile.

Per dialect, on one stack: a good image rolls out (canary, gate passed, the next wave, the
rollout completed), each BMC's ledger showing exactly its profile's calls (the push, then the
profile's activation reset); then a bad image (the demo's: it degrades the health of whichever
node activates it) trips the canary's gate, the rollout halts, and each offending node's
flip-back runs as that dialect's rollback does (``ROLLBACK``: the one line to change per
dialect when its mechanism changes)."""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from lockstep_cli.polling import until
from lockstep_common.vocabulary import Component, RollbackMechanism
from lockstep_inventory.adapters import state
from lockstep_sim.faults import Fault, FaultPlan
from lockstep_sim.profiles import GB200, ComponentClass
from lockstep_updater.ports import OWNER
from tests.integration.rollout_stack import (
    GPU_IMAGE,
    NODES,
    KitImage,
    Stack,
    release,
    running_stack,
)
from tests.integration.sim.pldm_fixtures import package_for
from tests.speed import scaled

pytestmark = pytest.mark.integration
# Ledger entries that are no call a profile makes: logins, and the simulator's note that a
# fault fired (the bad image degrading the device that runs it).
NOT_CALLS = {"session_create", "session_delete", "fault"}
FW = "/redfish/v1/UpdateService/FirmwareInventory"


class Rollback(enum.Enum):
    """What a flip-back after a tripped gate does on a dialect."""

    INACTIVE_IMAGE = "runs the image the BMC keeps in its other bank"
    REFLASH = "re-flashes the previous attested image under the signed approval"


def _cls(kind: str, first: str | None = None) -> ComponentClass:
    return next(c for c in GB200 if c.kind == kind and (first is None or c.ids[0] == first))


def _image(component: Component, cls: ComponentClass, version: str) -> KitImage:
    return KitImage(component, version, package_for(cls, version))


@dataclass(frozen=True)
class Dialect:
    """One dialect's rollout: its images, the calls its profile makes, its rollback."""

    name: str
    good: KitImage
    bad: KitImage  # a later version of the same component, the one that degrades health
    kind: str  # the simulated devices' kind the bad image lands on
    members: tuple[str, ...]  # the component's FirmwareInventory members on this BMC
    push: tuple[str, int]  # the ledger's action for the push, and its answer
    reset: tuple[str, int, str]  # the activation reset's action, answer and ResetType
    rollback: Rollback


GPU = _cls("gpu")
GPUS = tuple(GPU.ids)
BAD_GPU = _image(Component.GPU_VBIOS, GPU, "97.00.9B.00.07")  # the demo's bad image
DIALECTS = [
    Dialect(
        "nvidia-gb200-nvl",
        GPU_IMAGE,
        BAD_GPU,
        "gpu",
        GPUS,
        ("update-multipart", 202),
        ("Chassis.Reset", 204, "PowerCycle"),  # nvfwupd RF_PWR_CYCLE: the tray's power cycle
        Rollback.REFLASH,  # the signed plan lists gpu_vbios under reflash (ForceUpdate)
    ),
    Dialect(
        "nvidia-hgx",
        GPU_IMAGE,
        BAD_GPU,
        "gpu",
        GPUS,
        ("update-multipart", 202),
        ("ComputerSystem.Reset", 202, "ForceRestart"),  # answered with a Task, as captured
        Rollback.REFLASH,
    ),
    Dialect(  # the tray's BMC behind a Supermicro BMC: its FW_BMC_0 is the capture's BMC
        "supermicro-x13",
        _image(Component.BMC, _cls("bmc"), "GB200Nvl-25.03-1"),
        _image(Component.BMC, _cls("bmc"), "GB200Nvl-25.04-1"),
        "bmc",
        ("BMC",),  # the HMC's HGX_FW_BMC_0 is its own firmware, not this host's BMC
        ("upload", 202),
        ("Manager.Reset", 204, "GracefulRestart"),
        Rollback.INACTIVE_IMAGE,  # Backup_BMC, chosen by Managers/1's ActiveSoftwareImage
    ),
    Dialect(
        "dmtf-generic",
        # The host's UEFI: one member, which the generic profile and the inventory both name
        # (its NIC_0/NIC_1 share the component with the tray's CX7_0, which it does not map).
        _image(Component.BIOS, _cls("uefi"), "buildbrain-gcid-38700000"),
        _image(Component.BIOS, _cls("uefi"), "buildbrain-gcid-38700001"),
        "uefi",
        ("UEFI",),
        ("update-multipart", 204),  # DSP0266: a synchronous 2xx is the write done, no Task
        ("ComputerSystem.Reset", 204, "GracefulRestart"),
        # DSP0268 has no force flag: the previous image is sent as any update (no ForceUpdate),
        # under the signed plan's reflash, and the read-back decides.
        Rollback.REFLASH,
    ),
]


@pytest.fixture(params=DIALECTS, ids=lambda d: d.name)
async def dialect_stack(
    request: pytest.FixtureRequest,
    servers: Any,
    namespace: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[tuple[Stack, Dialect]]:
    dialect: Dialect = request.param
    # Firmware the BMC profile keeps no previous image of is one-way (the planner asks the
    # profile): the routine class takes it here, as a lab's would for this test. Soaks of a
    # second: each node's agent reports every 0.25 s, so a gate still has its 3 samples a node.
    routine = {"one_way_allowed": True, "canary_soak_s": 1, "wave_soak_s": 1}
    async with running_stack(
        servers,
        namespace,
        tmp_path,
        monkeypatch,
        dialect=dialect.name,
        image=dialect.good,
        routine=routine,
        updater={"push_gap_s": PUSH_GAP_S},
    ) as stack:
        yield stack, dialect


def versions(stack: Stack, node: str, dialect: Dialect) -> set[str]:
    comps = stack.rt.simulator.bmc(node).node.components
    return {comps[m].version for m in dialect.members}


def calls(stack: Stack, node: str, since: int = 0) -> list[tuple[str, Any]]:
    """The node's BMC calls from ledger entry ``since`` (``NOT_CALLS`` aside) and answers."""
    ledger = stack.rt.simulator.bmc(node).ledger[since:]
    return [(e["action"], e.get("status")) for e in ledger if e["action"] not in NOT_CALLS]


async def flip_backs(stack: Stack, rollout: str) -> dict[str, tuple[str, str]] | None:
    """The rollout's flip-back items (node -> state, reason), once every one has ended."""
    rows = await (
        stack.apps["updater"]
        .require()
        .pool.fetch(
            "SELECT node_id, state, reason FROM node_work "
            "WHERE rollout_id = $1 AND kind = 'rollback'",
            rollout,
        )
    )
    found = {r["node_id"]: (r["state"], r["reason"]) for r in rows}
    ended = {"done", "cancelled", "failed", "quarantined"}
    return found if found and {s for s, _ in found.values()} <= ended else None


async def pinned_and_swept(stack: Stack) -> None:
    """Once the inventory applied the completed rollout's pin, the fleet read again: what the
    planner plans the next rollout over (else every node drifts from its pin, unexplained)."""
    (pin,) = await stack.wait("planner", "pin.changed.")

    async def pinned() -> bool:
        async with stack.apps["inventory"].require().pool.acquire() as conn:
            return any(p.stack_hash == pin["stack_hash"] for p in await state.pins(conn))

    await until(pinned, what="the inventory applied the rollout's pin")
    await stack.sweep()


# The NVIDIA profiles' flip-back re-flashes the same BMC the rollout just pushed to, and waits
# the gap between pushes on the wall clock: their min_gap_s (30 s, nvfwupd UPDATE_DELAY) made
# each NVIDIA case a minute. The updater is told a gap of its own (``push_gap_s``), short but
# still kept, so the wait stays exercised.
PUSH_GAP_S = 1.0


@pytest.mark.timeout(PUSH_GAP_S + scaled(90))
async def test_a_rollout_runs_end_to_end_on_each_dialect_and_flips_back_its_own_way(
    dialect_stack: tuple[Stack, Dialect],
) -> None:
    stack, dialect = dialect_stack
    fleet = [n.id for n in stack.rt.fleet]
    before = {n: versions(stack, n, dialect) for n in fleet}
    assert all(dialect.good.version not in v for v in before.values())  # it really moves
    # The bad image degrades the node that activates it; the good one runs clean.
    plan = FaultPlan(
        faults=(Fault("degrade_health", components=(dialect.kind,), image=dialect.bad.version),)
    )
    stack.rt.simulator.set_faults(plan)

    # -- a good image: canary, gate passed, the next wave, completed -----------------------
    await stack.start_rollout()
    (canary,) = await stack.wait("planner", "wave.planned.")
    assert canary["wave"] == 0 and canary["components"] == [str(dialect.good.component)]
    (done,) = await stack.wait("planner", "rollout.completed.")
    assert done["nodes_updated"] == NODES and done["nodes_failed"] == 0, await stack.story()
    assert [p["wave"] for p in await stack.emitted("healthgate", "gate.passed.")] == [0, 1]
    action, reset_status, reset_type = dialect.reset
    for node in fleet:  # exactly the profile's calls: the push, then its activation reset
        assert calls(stack, node) == [dialect.push, (action, reset_status)], node
        (reset,) = [e for e in stack.rt.simulator.bmc(node).ledger if e["action"] == action]
        assert reset["reset_type"] == reset_type and reset["activated"], reset
        assert versions(stack, node, dialect) == {dialect.good.version}, node
        assert stack.rt.scheduler.node(node).drain is None
    await pinned_and_swept(stack)
    marks = {n: len(stack.rt.simulator.bmc(n).ledger) for n in fleet}
    scheduled = len(stack.rt.scheduler.ledger)

    # -- a bad image: the canary's gate trips, the rollout halts, the flip-back runs -------
    assert stack.signer is not None
    bad = release(stack.bundle.parent.parent, dialect.bad, name="bad", signer=stack.signer)
    await stack.start_rollout(kit=bad.bundle)
    (tripped,) = await stack.wait("healthgate", "gate.tripped.")
    rollout = tripped["rollout_id"]
    waves = [
        w for w in await stack.emitted("planner", "wave.planned.") if w["rollout_id"] == rollout
    ]
    assert [w["wave"] for w in waves] == [0]
    offending = set(tripped["offending_nodes"])
    assert offending and offending <= set(waves[0]["node_ids"])
    (halted,) = await stack.wait("planner", "rollout.halted.")
    assert halted["halted_by"] == "gate", halted
    items = await until(
        lambda: flip_backs(stack, rollout), "the flip-backs to end", PUSH_GAP_S + scaled(30)
    )
    assert set(items) >= offending, items
    outside = [n for n in fleet if n not in waves[0]["node_ids"]]
    for node in outside:  # nothing outside the canary was touched
        assert calls(stack, node, marks[node]) == [], node
    rolled = await stack.emitted("updater", "device.rolled_back.")
    for node in offending:
        after = calls(stack, node, marks[node])
        assert after[:2] == [dialect.push, dialect.reset[:2]], after  # the bad image ran
        owned = [
            e.action
            for e in stack.rt.scheduler.ledger[scheduled:]
            if e.node_id == node and e.by == OWNER
        ]
        ledger = stack.rt.simulator.bmc(node).ledger[marks[node] :]
        events = [e for e in rolled if e["node_id"] == node]
        flipped_back_as_expected(
            stack, dialect, node, items[node], after[2:], owned, ledger, events
        )


def flipped_back_as_expected(
    stack: Stack,
    dialect: Dialect,
    node: str,
    item: tuple[str, str],
    flip: list[tuple[str, Any]],
    owned: list[str],
    ledger: list[dict[str, Any]],
    events: list[dict[str, Any]],
) -> None:
    """The offending ``node``'s flip-back ran as ``dialect.rollback`` says: ``item`` its
    (state, reason), ``flip`` the BMC calls after the bad image's, ``owned`` what Lockstep
    asked of the scheduler since the bad rollout began, ``events`` its device.rolled_back."""
    state, reason = item
    reset = dialect.reset[:2]
    if dialect.rollback is Rollback.INACTIVE_IMAGE:
        assert state == "done", reason
        assert flip == [("patch", 200), reset], flip
        (patch,) = [e for e in ledger if e["action"] == "patch"]
        assert patch["links"] == {"ActiveSoftwareImage": {"@odata.id": f"{FW}/Backup_BMC"}}
        assert owned == ["drain", "resume", "drain", "resume"], owned
        assert versions(stack, node, dialect) == {dialect.good.version}
        (event,) = events
        assert event["mechanism"] == str(RollbackMechanism.INACTIVE_IMAGE)
    else:  # REFLASH
        assert state == "done", reason
        assert flip[0] == dialect.push and flip[-1] == reset, flip
        assert owned == ["drain", "resume", "drain", "resume"], owned
        assert versions(stack, node, dialect) == {dialect.good.version}
        (event,) = events
        assert event["mechanism"] == str(RollbackMechanism.REFLASH)
