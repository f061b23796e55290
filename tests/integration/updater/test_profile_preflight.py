"""Preflight chooses each node's BMC profile from what the BMC says (or the one the updater's
``bmc_profiles`` names) and refuses, in one line naming the BMC, the profile and what is
missing, before anything is cordoned or written (issue 29 item 3): each refusal leaves the
BMC's ledger without a write and the scheduler without a drain."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from lockstep_sim import resources, service_root
from lockstep_updater.domain.progress import UpdateProgress, load
from lockstep_updater.domain.steps import NodeStep
from lockstep_updater.executor import Executor
from lockstep_updater.ports import OWNER
from lockstep_updater.settings import Settings
from lockstep_updater.store import UPDATE
from lockstep_updater.testing.sim_fleet import sim_executor
from tests.integration.sim.pldm_fixtures import NEW_GPU_VERSION
from tests.integration.updater.conftest import ENV, FAST, World
from tests.integration.updater.test_executor_sim import plan_and_release

pytestmark = pytest.mark.integration
NODE = "node-00000"
LOGINS = {"session_create", "session_delete"}


def executor(w: World, **profiles: str) -> Executor:
    """The executor with ``bmc_profiles`` naming a profile per node id or SKU."""
    policy = dataclasses.replace(FAST, bmc_profiles=dict(profiles))
    ex = sim_executor(w.rt, w.store, w.facts, w.bundle, policy, ENV)
    w.executors.append(ex)
    return ex


async def refused(w: World, ex: Executor | None = None) -> str:
    """Run the node's update to its end; assert it was refused with nothing changed on its
    BMC (no write in its ledger, its versions as they were) or its scheduler (no drain);
    the reason."""
    before = {m: c.version for m, c in w.rt.simulator.bmc(NODE).node.components.items()}
    await plan_and_release(w, (NODE,))
    await w.settle(ex)
    item = w.store.item(NODE)
    assert item.state is NodeStep.FAILED, item.reason
    writes = [e for e in w.rt.simulator.bmc(NODE).ledger if e["action"] not in LOGINS]
    assert writes == []
    after = {m: c.version for m, c in w.rt.simulator.bmc(NODE).node.components.items()}
    assert after == before
    assert [e for e in w.rt.scheduler.ledger if e.node_id == NODE and e.by == OWNER] == []
    assert w.rt.scheduler.node(NODE).drain is None
    assert "\n" not in item.reason and item.reason.endswith("; nothing written")
    return item.reason


async def test_the_profile_chosen_from_what_the_bmc_says_is_recorded(world: World) -> None:
    await plan_and_release(world, (NODE,))
    await world.settle()
    item = world.store.item(NODE)
    assert item.state is NodeStep.DONE, item.reason
    progress = load(UPDATE, item.progress)
    assert isinstance(progress, UpdateProgress)
    assert (progress.bmc_profile, progress.bmc_login) == ("lockstep-sim", "session")


async def test_an_account_without_the_privilege_is_refused(world: World) -> None:
    bmc = world.rt.simulator.bmc(NODE)
    bmc.accounts.add("viewer", "viewer-pass", "ReadOnly")
    ex = sim_executor(
        world.rt,
        world.store,
        world.facts,
        world.bundle,
        FAST,
        {"SIMBMC_USERNAME": "viewer", "SIMBMC_PASSWORD": "viewer-pass"},
    )
    world.executors.append(ex)
    reason = await refused(world, ex)
    assert reason == (
        f"refused: BMC {NODE} (profile lockstep-sim): the account (ReadOnly) lacks what the "
        "profile's calls need (DSP8011: ConfigureComponents for the UpdateService push "
        "(multipart, simple_update), UpdateService.Activate; it holds: ConfigureSelf, Login); "
        "nothing written"
    )


async def test_a_component_the_named_profile_maps_to_no_member_is_refused(world: World) -> None:
    # dmtf-generic, named for the node's SKU, knows no HGX_FW_GPU_* member.
    reason = await refused(world, executor(world, gb200="dmtf-generic"))
    assert reason == (
        f"refused: BMC {NODE} (profile dmtf-generic): no FirmwareInventory member holds "
        "gpu_vbios; nothing written"
    )


async def test_a_bmc_without_the_profiles_push_method_is_refused(world: World) -> None:
    world.rt.simulator.bmc(NODE).multipart_push = False  # SimpleUpdate only
    reason = await refused(world, executor(world, **{NODE: "nvidia-gb200-nvl"}))
    assert reason == (
        f"refused: BMC {NODE} (profile nvidia-gb200-nvl): the BMC offers none of the profile's "
        "push methods (multipart; it offers: simple_update); the profile's activation reset "
        "(chassis PowerCycle): /redfish/v1/Chassis/BMC_0 cannot be read (HTTP 404); "
        "nothing written"
    )


async def test_an_image_over_max_image_size_is_refused(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(resources, "MAX_IMAGE_BYTES", world.gpu.size - 1)
    reason = await refused(world)
    assert reason == (
        f"refused: BMC {NODE} (profile lockstep-sim): the gpu_vbios image is {world.gpu.size} "
        f"bytes, over the BMC's MaxImageSizeBytes {world.gpu.size - 1}; nothing written"
    )


async def test_a_downgrade_without_a_signed_approval_is_refused(world: World) -> None:
    newer = "97.00.FF.00.01"
    for member, comp in world.rt.simulator.bmc(NODE).node.components.items():
        if member.startswith("HGX_FW_GPU_"):
            comp.version = newer
    reason = await refused(world)
    downgrades = "; ".join(f"HGX_FW_GPU_{i} {newer} -> {NEW_GPU_VERSION}" for i in range(4))
    assert reason == (
        f"refused: BMC {NODE} (profile lockstep-sim): gpu_vbios would be downgraded "
        f"({downgrades}) without a signed rollback approval; nothing written"
    )


async def test_a_login_the_named_profile_does_not_allow_is_refused_before_logging_in(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = service_root.service_root

    def no_sessions(uuid: str, name: str) -> dict[str, Any]:
        doc = real(uuid, name)
        doc.pop("SessionService", None)
        doc.pop("Links", None)
        return doc

    monkeypatch.setattr(service_root, "service_root", no_sessions)
    reason = await refused(world, executor(world, gb200="nvidia-gb200-nvl"))
    assert reason == (
        f"refused: BMC {NODE} (profile nvidia-gb200-nvl): login by basic is not allowed by the "
        "profile (allowed: session); nothing written"
    )
    assert [e for e in world.rt.simulator.bmc(NODE).ledger if e["action"] in LOGINS] == []


def test_the_setting_refuses_a_profile_nobody_shipped_by_name() -> None:
    with pytest.raises(ValueError, match=r"bmc_profiles\['gb200'\]: no BMC profile 'idrac'"):
        Settings(bmc_profiles={"gb200": "idrac"})
