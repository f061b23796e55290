"""The Redfish write side (``lockstep_redfish.update``) against the emulated BMCs: one test per
behaviour, each proved by what the BMC's ledger recorded (how many pushes it accepted, what
else it was asked) and by the versions it reports afterwards."""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from lockstep_common.errors import Disposition, disposition_for
from lockstep_redfish import BmcTarget, RedfishClient, RetryPolicy
from lockstep_redfish.errors import (
    ImageDigestMismatch,
    NotVerified,
    PushOutcomeUnknown,
    ResourceChanged,
    TaskDeadlineExceeded,
    TaskFailed,
    TaskUnreachable,
    UpdateRefused,
)
from lockstep_redfish.image import FirmwareImage
from lockstep_redfish.image_server import ImageServer
from lockstep_redfish.models import UpdatableSoftware
from lockstep_redfish.preflight import UpdateRequest
from lockstep_redfish.session import BmcSession
from lockstep_redfish.tasks import TaskPolicy
from lockstep_redfish.update import SYSTEMS, FirmwareUpdate, UpdatePolicy
from lockstep_sim.faults import Fault, FaultPlan
from lockstep_sim.options import DEFAULT_PASSWORD, DEFAULT_USERNAME, SimOptions
from lockstep_sim.resources import MAX_IMAGE_BYTES
from lockstep_sim.simulator import Simulator
from tests.integration.sim.pldm_fixtures import GB200_GPU, NEW_GPU_VERSION, package_for

pytestmark = pytest.mark.integration
NODE = "node-00000"
FW = "/redfish/v1/UpdateService/FirmwareInventory"
GPU0, GPU1 = f"{FW}/HGX_FW_GPU_0", f"{FW}/HGX_FW_GPU_1"
OLD = GB200_GPU.version  # 97.00.6C.00.03
PUSH = "update-multipart"  # the ledger's action name for a POST to MultipartHttpPushUri
FAST = UpdatePolicy(
    tasks=TaskPolicy(
        deadline_s=10, poll_s=0.01, min_poll_s=0.005, max_poll_s=0.02, unreachable_s=5
    ),
    resend=RetryPolicy(backoff_s=0.01, max_retry_after_s=5),
    settle_s=1.0,
    reachable_s=5.0,
    read_poll_s=0.01,
)
Factory = Callable[..., Awaitable[Simulator]]


class Credentials:
    def get(self, node_id: str) -> tuple[str, str]:
        return DEFAULT_USERNAME, DEFAULT_PASSWORD


def image_of(data: bytes, name: str = "gpu.fwpkg") -> FirmwareImage:
    return FirmwareImage(data, hashlib.sha384(data).hexdigest(), name)


GPU_IMAGE = image_of(package_for(GB200_GPU, NEW_GPU_VERSION))
TO_NEW = UpdateRequest((GPU0, GPU1), NEW_GPU_VERSION)


@pytest.fixture
async def make_sim() -> AsyncIterator[Factory]:
    """Simulators with a fault plan, on their own loopback range."""
    sims: list[Simulator] = []

    async def make(*faults: Fault, time_scale: float = 0.002, **options: Any) -> Simulator:
        sim = Simulator(
            SimOptions(
                1,
                "gb200",
                time_scale=time_scale,
                host_base=f"127.73.{len(sims)}.1",
                port=0,
                faults=FaultPlan(faults),
                **options,
            )
        )
        await sim.start()
        sims.append(sim)
        return sim

    yield make
    for sim in sims:
        sim.set_faults(None)  # release a stuck task before the runner is cancelled
        await sim.stop()


def session(sim: Simulator) -> BmcSession:
    client = RedfishClient(Credentials(), RetryPolicy(timeout_s=2, retries=1, backoff_s=0.01))
    return client.session(BmcTarget(NODE, sim.bmc_url(NODE), allow_plain_http=True))


def actions(sim: Simulator, name: str, status: int | None = None) -> list[dict[str, Any]]:
    """The node's ledger entries of ``name`` (with ``status``, if given)."""
    return [
        e
        for e in sim.bmc(NODE).ledger
        if e["action"] == name and (status is None or e.get("status") == status)
    ]


def version(sim: Simulator, member: str) -> str:
    return sim.bmc(NODE).node.components[member.rsplit("/", 1)[1]].version


def assert_logged_out(sim: Simulator) -> None:
    assert sim.bmc(NODE).sessions.ids() == []


async def test_push_stage_activate_and_verify(make_sim: Factory) -> None:
    sim = await make_sim()
    request = UpdateRequest((GPU0, GPU1), NEW_GPU_VERSION, stage=True)
    async with session(sim) as bmc:
        result = await FirmwareUpdate(bmc, FAST).update(GPU_IMAGE, request)
    assert result.pushed and result.before == {GPU0: OLD, GPU1: OLD}
    assert result.after == {GPU0: NEW_GPU_VERSION, GPU1: NEW_GPU_VERSION}
    assert result.task is not None and result.task.state == "Completed"
    assert [a.state for a in result.activations] == ["Completed"]
    (push,) = actions(sim, PUSH)
    assert push["status"] == 202 and push["stage"] is True and push["targets"] == [GPU0, GPU1]
    assert push["bytes"] == len(GPU_IMAGE.data)
    assert push["sha384"] == hashlib.sha384(GPU_IMAGE.data).hexdigest()
    (activate,) = actions(sim, "UpdateService.Activate", 202)
    assert activate["targets"] == ["HGX_FW_GPU_0", "HGX_FW_GPU_1"]
    assert version(sim, GPU0) == NEW_GPU_VERSION and version(sim, f"{FW}/HGX_FW_GPU_2") == OLD
    assert_logged_out(sim)


async def test_immediate_push_and_each_member_activate(make_sim: Factory) -> None:
    sim = await make_sim()
    async with session(sim) as bmc:
        update = FirmwareUpdate(bmc, FAST)
        result = await update.update(GPU_IMAGE, TO_NEW)
        assert result.after == {GPU0: NEW_GPU_VERSION, GPU1: NEW_GPU_VERSION}
        # SoftwareInventory.Activate, member by member, on a newly staged image:
        staged = UpdateRequest((GPU0,), "97.00.9B.00.01", stage=True)
        again = image_of(package_for(GB200_GPU, "97.00.9B.00.01"))
        plan = await update.preflight(again, staged)
        await update.wait(await update.push(again, staged, plan))
        (ref,) = await update.activate((GPU0,), each=True)
        await update.wait(ref)
        assert await update.verify(staged, plan.before) == {GPU0: "97.00.9B.00.01"}
    assert len(actions(sim, PUSH, 202)) == 2
    assert len(actions(sim, "SoftwareInventory.Activate", 202)) == 1
    assert_logged_out(sim)


async def test_already_at_the_version_writes_nothing(make_sim: Factory) -> None:
    sim = await make_sim()
    for member in ("HGX_FW_GPU_0", "HGX_FW_GPU_1"):
        sim.bmc(NODE).node.components[member].version = NEW_GPU_VERSION
    async with session(sim) as bmc:
        result = await FirmwareUpdate(bmc, FAST).update(GPU_IMAGE, TO_NEW)
    assert not result.pushed and result.after == {GPU0: NEW_GPU_VERSION, GPU1: NEW_GPU_VERSION}
    assert actions(sim, PUSH) == []


async def test_an_image_over_max_image_size_is_refused_before_sending(make_sim: Factory) -> None:
    sim = await make_sim()
    too_big = image_of(bytes(MAX_IMAGE_BYTES + 1))
    async with session(sim) as bmc:
        with pytest.raises(UpdateRefused, match=r"over MaxImageSizeBytes 67108864") as info:
            await FirmwareUpdate(bmc, FAST).update(too_big, TO_NEW)
    assert f"{MAX_IMAGE_BYTES + 1} bytes" in str(info.value)
    assert disposition_for(info.value, delivery=1, max_deliver=3) is Disposition.DEAD_LETTER
    assert actions(sim, PUSH) == []
    assert_logged_out(sim)


async def test_a_target_not_updateable_or_write_protected_is_refused(make_sim: Factory) -> None:
    sim = await make_sim()
    gpu1 = sim.bmc(NODE).node.components["HGX_FW_GPU_1"]
    gpu1.cls = dataclasses.replace(gpu1.cls, updateable=False)  # a device the BMC will not flash
    async with session(sim) as bmc:
        update = FirmwareUpdate(bmc, FAST)
        await update.patch(GPU0, {"WriteProtected": True})  # an operator's protection
        with pytest.raises(UpdateRefused) as info:
            await update.update(GPU_IMAGE, TO_NEW)
    assert str(info.value) == (
        f"update refused: {GPU0} is WriteProtected; {GPU1} is not Updateable"
    )
    assert actions(sim, PUSH) == []


async def test_a_version_below_lowest_supported_is_refused(make_sim: Factory) -> None:
    sim = await make_sim()
    old = image_of(package_for(GB200_GPU, "97.00.50.00.01"))
    async with session(sim) as bmc:
        with pytest.raises(UpdateRefused) as info:
            await FirmwareUpdate(bmc, FAST).update(old, UpdateRequest((GPU0,), "97.00.50.00.01"))
    assert str(info.value) == (
        f"update refused: {GPU0}: version '97.00.50.00.01' is below "
        "LowestSupportedVersion '97.00.52.00.01'"
    )
    assert actions(sim, PUSH) == []


async def test_503_and_500_answers_to_the_push_then_one_accepted_push(make_sim: Factory) -> None:
    sim = await make_sim()
    async with session(sim) as bmc:
        update = FirmwareUpdate(bmc, FAST)
        plan = await update.preflight(GPU_IMAGE, TO_NEW)
        # From here requests answer 503 (Retry-After 1 s), then 500, then normally.
        sim.set_faults(
            FaultPlan(
                (
                    Fault("http_5xx", status=503, retry_after=1, count=1),
                    Fault("http_5xx", status=500, retry_after=0, count=1),
                )
            )
        )
        started = time.monotonic()
        ref = await update.push(GPU_IMAGE, TO_NEW, plan)
        waited = time.monotonic() - started
        await update.wait(ref)
        assert await update.verify(TO_NEW, plan.before) == dict.fromkeys(
            TO_NEW.targets, NEW_GPU_VERSION
        )
    faults = [e for e in actions(sim, "fault") if e["path"].endswith(PUSH)]
    assert len(faults) == 2
    assert len(actions(sim, PUSH)) == 1 and actions(sim, PUSH, 202)
    assert waited >= 1.0  # Retry-After honoured before the first resend


async def test_a_push_that_may_have_been_taken_is_never_resent(make_sim: Factory) -> None:
    sim = await make_sim()
    async with session(sim) as bmc:
        update = FirmwareUpdate(bmc, FAST)
        plan = await update.preflight(GPU_IMAGE, TO_NEW)
        sim.set_faults(FaultPlan((Fault("connection_reset", count=1),)))  # after the request
        with pytest.raises(PushOutcomeUnknown, match="may have been accepted"):
            await update.push(GPU_IMAGE, TO_NEW, plan)
        sim.set_faults(None)
    assert [e["path"] for e in actions(sim, "fault")] == [f"/redfish/v1/UpdateService/{PUSH}"]
    assert actions(sim, PUSH) == []


async def test_a_task_stuck_past_its_deadline_is_a_clear_failure(make_sim: Factory) -> None:
    sim = await make_sim(Fault("task_stuck", percent=99))
    policy = dataclasses.replace(FAST, tasks=dataclasses.replace(FAST.tasks, deadline_s=0.3))
    async with session(sim) as bmc:
        with pytest.raises(TaskDeadlineExceeded) as info:
            await FirmwareUpdate(bmc, policy).update(GPU_IMAGE, TO_NEW)
    assert "still Running at 99% after the 0.3s deadline; left running" in str(info.value)
    assert disposition_for(info.value, delivery=1, max_deliver=3) is Disposition.DEAD_LETTER
    assert len(actions(sim, PUSH)) == 1 and actions(sim, "delete") == []  # not cancelled
    assert_logged_out(sim)


@pytest.mark.parametrize("forget_state", [False, True], ids=["keeps-state", "forgets-state"])
async def test_a_bmc_reset_mid_task_is_waited_for_and_verified_without_a_second_push(
    make_sim: Factory, forget_state: bool
) -> None:
    # The BMC goes dark for 30 BMC minutes (0.3 s here) halfway through the flash; a BMC
    # that forgets its state also drops our session (401) and the task (404).
    reboot = Fault("bmc_reboot_mid_task", duration_minutes=30, count=1, forget_state=forget_state)
    sim = await make_sim(reboot, time_scale=0.01)
    async with session(sim) as bmc:
        result = await FirmwareUpdate(bmc, FAST).update(GPU_IMAGE, TO_NEW)
    assert result.after == {GPU0: NEW_GPU_VERSION, GPU1: NEW_GPU_VERSION}
    assert result.task is not None and result.task.longest_unreachable_s >= 0.2
    assert result.task.forgotten is forget_state
    assert len(actions(sim, PUSH)) == 1  # exactly one push, accepted
    assert len(actions(sim, PUSH, 202)) == 1
    logins = len(actions(sim, "session_create", 201))
    assert logins == (2 if forget_state else 1)
    assert_logged_out(sim)


async def test_a_bmc_dark_longer_than_the_bound_is_not_pushed_again(make_sim: Factory) -> None:
    sim = await make_sim(Fault("bmc_reboot_mid_task", duration_minutes=300), time_scale=0.01)
    policy = dataclasses.replace(FAST, tasks=dataclasses.replace(FAST.tasks, unreachable_s=0.3))
    async with session(sim) as bmc:
        with pytest.raises(TaskUnreachable, match="do not push again") as info:
            await FirmwareUpdate(bmc, policy).update(GPU_IMAGE, TO_NEW)
    assert disposition_for(info.value, delivery=1, max_deliver=3) is Disposition.RETRY
    assert len(actions(sim, PUSH)) == 1


@pytest.mark.parametrize(
    ("fault", "problem"),
    [
        (
            Fault("wrong_version", components=("HGX_FW_GPU_1",), version="97.00.52.00.01"),
            f"{GPU1} silently downgraded from '{OLD}' to '97.00.52.00.01'",
        ),
        (
            Fault("silent_revert", components=("HGX_FW_GPU_1",), delay_minutes=0),
            f"{GPU1} unchanged at '{OLD}'",
        ),
    ],
    ids=["downgrade", "revert"],
)
async def test_a_completed_task_with_the_wrong_version_read_back_fails(
    make_sim: Factory, fault: Fault, problem: str
) -> None:
    sim = await make_sim(fault)
    policy = dataclasses.replace(FAST, settle_s=0.2)
    async with session(sim) as bmc:
        with pytest.raises(NotVerified) as info:
            await FirmwareUpdate(bmc, policy).update(GPU_IMAGE, TO_NEW)
    assert str(info.value) == f"update to '{NEW_GPU_VERSION}' not verified: {problem}"
    assert version(sim, GPU0) == NEW_GPU_VERSION  # the other target did update
    assert len(actions(sim, PUSH, 202)) == 1


async def test_a_digest_mismatch_fails_closed_and_sends_nothing(make_sim: Factory) -> None:
    sim = await make_sim()
    tampered = FirmwareImage(GPU_IMAGE.data[:-1] + b"\x00", GPU_IMAGE.digest, "gpu.fwpkg")
    async with session(sim) as bmc:
        update = FirmwareUpdate(bmc, FAST)
        with pytest.raises(ImageDigestMismatch, match="nothing was sent"):
            await update.update(tampered, TO_NEW)
        assert [e["action"] for e in sim.bmc(NODE).ledger] == ["session_create"]
        # The bytes change between the checks and the push: the push itself re-hashes.
        plan = await update.preflight(GPU_IMAGE, TO_NEW)
        with pytest.raises(ImageDigestMismatch):
            await update.push(tampered, TO_NEW, plan)
    assert actions(sim, PUSH) == [] and actions(sim, "fault") == []
    assert_logged_out(sim)


async def test_simple_update_when_the_bmc_has_no_multipart_push(make_sim: Factory) -> None:
    sim = await make_sim(multipart_push=False)
    async with ImageServer("127.0.0.1") as server, session(sim) as bmc:
        result = await FirmwareUpdate(bmc, FAST).update(GPU_IMAGE, TO_NEW, server=server)
        assert list(server.fetches.values()) == [1]
        url = next(iter(server.fetches))
    assert result.after == {GPU0: NEW_GPU_VERSION, GPU1: NEW_GPU_VERSION}
    (pull,) = actions(sim, "UpdateService.SimpleUpdate", 202)
    assert pull["image_uri"] == url and actions(sim, PUSH) == []


async def test_a_failed_flash_is_a_task_failure(make_sim: Factory) -> None:
    sim = await make_sim(Fault("failed_flash", components=("HGX_FW_GPU_0",)))
    async with session(sim) as bmc:
        with pytest.raises(TaskFailed, match=r"ended Exception: .*ApplyFailed"):
            await FirmwareUpdate(bmc, FAST).update(GPU_IMAGE, TO_NEW)
    assert version(sim, GPU0) == OLD


async def test_on_reset_apply_time_then_system_reset_then_verify(make_sim: Factory) -> None:
    sim = await make_sim()
    request = UpdateRequest((GPU0, GPU1), NEW_GPU_VERSION, apply_time="OnReset")
    async with session(sim) as bmc:
        update = FirmwareUpdate(bmc, FAST)
        result = await update.update(GPU_IMAGE, request)
        assert result.after is None and version(sim, GPU0) == OLD  # waits for the reset
        (system,) = await update.collection(SYSTEMS)
        with pytest.raises(UpdateRefused, match="ResetType 'PowerCycle' not allowed"):
            await update.reset(system, "PowerCycle")
        assert await update.reset(system, "ForceRestart") is None  # 204: done
        assert await update.verify(request, result.before) == dict.fromkeys(
            request.targets, NEW_GPU_VERSION
        )
    (reset,) = actions(sim, "ComputerSystem.Reset", 204)
    assert reset["activated"] == ["HGX_FW_GPU_0", "HGX_FW_GPU_1"]


async def test_a_manager_reset_is_waited_for(make_sim: Factory) -> None:
    sim = await make_sim(time_scale=0.1)  # 2 BMC minutes of reboot -> 0.2 s dark
    async with session(sim) as bmc:
        update = FirmwareUpdate(bmc, FAST)
        (manager,) = await update.collection("/redfish/v1/Managers")
        await update.reset(manager, "GracefulRestart")
        assert await update.wait_reachable() >= 0.1
    assert len(actions(sim, "Manager.Reset", 204)) == 1
    assert_logged_out(sim)


async def test_patch_sends_if_match_and_a_stale_etag_changes_nothing(make_sim: Factory) -> None:
    sim = await make_sim()
    async with session(sim) as bmc:
        update = FirmwareUpdate(bmc, FAST)
        seen = await update.read(UpdatableSoftware, GPU0)
        assert seen.etag is not None and seen.item.WriteProtected is False
        await update.patch(GPU0, {"WriteProtected": True}, etag=seen.etag)
        with pytest.raises(ResourceChanged, match="changed since it was read") as info:
            await update.patch(GPU0, {"WriteProtected": False}, etag=seen.etag)  # stale now
        assert (await update.read(UpdatableSoftware, GPU0)).item.WriteProtected is True
    assert disposition_for(info.value, delivery=1, max_deliver=3) is Disposition.RETRY
    assert [e["status"] for e in actions(sim, "patch")] == [200, 412]
