"""The simulator's Redfish dialects (``--dialect``): each is recognised as the BMC profile built
from the same real capture, reproduces the capture's UpdateService shape, takes only what that
BMC takes, and still passes DMTF's service validator."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from lockstep_cli.polling import until
from lockstep_redfish import BmcTarget, RedfishClient, RetryPolicy
from lockstep_redfish.errors import NotVerified
from lockstep_redfish.image import FirmwareImage
from lockstep_redfish.preflight import UpdateRequest
from lockstep_redfish.probe import probe
from lockstep_redfish.profile import profile_named
from lockstep_redfish.tasks import TaskPolicy
from lockstep_redfish.update import FirmwareUpdate, UpdatePolicy, policy_for
from lockstep_sim.dialects import COMMIT_IMAGE
from lockstep_sim.faults import Fault, FaultPlan
from lockstep_sim.options import (
    DEFAULT_PASSWORD,
    DEFAULT_USERNAME,
    OPERATOR_USERNAME,
    SimOptions,
)
from lockstep_sim.profiles import HGX_H100
from lockstep_sim.simulator import Simulator
from tests.integration.sim.test_redfish import _form
from tests.reference import REFERENCE

from .conftest import AUTH, BIN, CSDL, wait_task
from .pldm_fixtures import GB200_GPU, NEW_GPU_VERSION, package_for

pytestmark = pytest.mark.integration
NODE = "node-00000"
FW = "/redfish/v1/UpdateService/FirmwareInventory"
PUSH = "/redfish/v1/UpdateService/update-multipart"
GB200_CAPTURE = REFERENCE / "redfish-mockups" / "nvidia_gb200" / "redfish" / "v1"
Factory = Callable[..., Awaitable[Simulator]]


class Credentials:
    def get(self, node_id: str) -> tuple[str, str]:
        return OPERATOR_USERNAME, DEFAULT_PASSWORD  # Operator-class, as Lockstep uses


@pytest.fixture
async def make_sim() -> AsyncIterator[Factory]:
    sims: list[Simulator] = []

    async def make(
        dialect: str, profile: str = "gb200", faults: FaultPlan | None = None
    ) -> Simulator:
        sim = Simulator(
            SimOptions(
                1,
                profile,
                dialect=dialect,
                host_base=f"127.78.{len(sims)}.1",
                port=0,
                time_scale=0.002,
                faults=faults,
            )
        )
        await sim.start()
        sims.append(sim)
        return sim

    yield make
    for sim in sims:
        await sim.stop()


@pytest.mark.parametrize(
    ("dialect", "hardware", "profile"),
    [
        ("nvidia-gb200-nvl", "gb200", "nvidia-gb200-nvl"),
        ("nvidia-hgx", "hgx-h100", "nvidia-hgx"),
        ("supermicro-x13", "gb200", "supermicro-x13"),
        ("dmtf-generic", "gb200", "dmtf-generic"),
        ("lockstep", "gb200", "lockstep-sim"),  # the simulator's own, said in its root's Oem
        ("lockstep", "hgx-h100", "lockstep-sim"),
    ],
)
async def test_each_dialect_is_recognised_as_its_profile(
    make_sim: Factory, dialect: str, hardware: str, profile: str
) -> None:
    sim = await make_sim(dialect, hardware)
    client = RedfishClient(Credentials(), RetryPolicy(timeout_s=5))
    found = await probe(client, BmcTarget("n1", sim.bmc_url(NODE), allow_plain_http=True))
    assert found.profile == profile
    assert found.refusals == []
    assert found.push == "multipart"


async def _get(sim: Simulator, path: str) -> dict[str, Any]:
    async with aiohttp.ClientSession(headers=AUTH) as http, http.get(sim.bmc_url(NODE) + path) as r:
        body: dict[str, Any] = await r.json()
        return body


async def test_the_gb200_dialect_reproduces_the_captured_update_service(
    make_sim: Factory,
) -> None:
    sim = await make_sim("nvidia-gb200-nvl")
    ours = await _get(sim, "/redfish/v1/UpdateService")
    theirs = json.loads((GB200_CAPTURE / "UpdateService" / "index.json").read_text())
    root = await _get(sim, "/redfish/v1/")
    captured_root = json.loads((GB200_CAPTURE / "index.json").read_text())
    assert (root["Vendor"], root["Product"]) == (captured_root["Vendor"], captured_root["Product"])
    support = "MultipartHttpPushUri@Redfish.OperationApplyTimeSupport"
    assert ours[support]["SupportedValues"] == theirs[support]["SupportedValues"] == ["Immediate"]
    assert (
        ours["Oem"]["Nvidia"]["MultipartHttpPushUriOptions"]
        == theirs["Oem"]["Nvidia"]["MultipartHttpPushUriOptions"]
    )
    assert (
        ours["Actions"]["Oem"]["#NvidiaUpdateService.CommitImage"]["target"]
        == (theirs["Actions"]["Oem"]["#NvidiaUpdateService.CommitImage"]["target"])
    )
    assert set(ours["Actions"]) == set(theirs["Actions"]) == {"Oem"}  # no SimpleUpdate, Activate
    member = await _get(sim, f"{FW}/FW_BMC_0")
    assert "Oem" not in member["Actions"]  # no invented SwitchBank on a real dialect


async def test_the_gb200_dialect_takes_only_what_the_real_bmc_takes(make_sim: Factory) -> None:
    sim = await make_sim("nvidia-gb200-nvl")
    url = sim.bmc_url(NODE)
    async with aiohttp.ClientSession(headers=AUTH) as http:

        async def post(path: str, body: dict[str, Any]) -> int:
            async with http.post(url + path, json=body) as reply:
                return reply.status

        simple = "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate"
        assert await post(simple, {"ImageURI": "http://127.0.0.1/x"}) == 404
        assert await post("/redfish/v1/UpdateService/Actions/UpdateService.Activate", {}) == 404
        switch = f"{FW}/HGX_FW_GPU_0/Actions/Oem/LockstepSim.SwitchBank"
        assert await post(switch, {}) == 404
        gpu = sim.bmc(NODE).node.components["HGX_FW_GPU_0"]
        gpu.inactive_version = "older"
        assert await post(COMMIT_IMAGE, {"Targets": [f"{FW}/HGX_FW_GPU_0"]}) == 204
        assert gpu.inactive_version == gpu.version  # the running image copied to the other bank
        assert await post(COMMIT_IMAGE, {"Targets": "all"}) == 400
    committed = [e for e in sim.bmc(NODE).ledger if e["action"].endswith("CommitImage")]
    assert [(e["status"], e.get("targets")) for e in committed] == [
        (204, ["HGX_FW_GPU_0"]),
        (400, None),
    ]


async def test_no_dialect_offers_an_invented_bank_switch(make_sim: Factory) -> None:
    """The simulator's own dialect, like every real one, offers no action to run the other
    bank again (the OEM ``SwitchBank`` no real BMC had is gone): a flip-back re-flashes."""
    sim = await make_sim("lockstep")
    member = await _get(sim, f"{FW}/HGX_FW_GPU_0")
    assert set(member["Actions"]) == {"#SoftwareInventory.Activate"} and "Oem" not in member
    switch = f"{FW}/HGX_FW_GPU_0/Actions/Oem/LockstepSim.SwitchBank"
    async with (
        aiohttp.ClientSession(headers=AUTH) as http,
        http.post(sim.bmc_url(NODE) + switch, json={}) as reply,
    ):
        assert reply.status == 404


async def test_the_sim_refuses_an_unknown_dialect_naming_the_known() -> None:
    with pytest.raises(ValueError, match=r"unknown dialect 'dell' \(known: lockstep, "):
        SimOptions(1, "gb200", dialect="dell")


async def _validate(sim: Simulator, path: str, logdir: Path) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        str(BIN / "rf_service_validator"),
        *("-r", sim.bmc_url(NODE), "-u", DEFAULT_USERNAME, "-p", DEFAULT_PASSWORD),
        *("--authtype", "Session", "--schema_directory", str(CSDL), "--logdir", str(logdir)),
        *("--payload", "Single", path),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 120)
    return proc.returncode or 0, out.decode(errors="replace")


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("dialect", "hardware", "path"),
    [
        ("nvidia-gb200-nvl", "gb200", "/redfish/v1/UpdateService"),
        ("nvidia-hgx", "hgx-h100", "/redfish/v1/UpdateService"),
        ("supermicro-x13", "gb200", "/redfish/v1/UpdateService"),
        ("supermicro-x13", "gb200", "/redfish/v1/Managers/1"),  # its SoftwareImages links
        ("dmtf-generic", "gb200", "/redfish/v1/UpdateService"),
    ],
)
async def test_dmtf_service_validator_passes_what_each_dialect_changes(
    make_sim: Factory, tmp_path: Path, dialect: str, hardware: str, path: str
) -> None:
    """What a dialect changes (UpdateService: OEM actions, OEM options, apply times; the
    Supermicro manager's image links), each dialect's resource validated on its own. One run
    costs ~10 s, mostly the validator loading its schemas: a resource each, not the tree."""
    sim = await make_sim(dialect, hardware)
    code, out = await _validate(sim, path, tmp_path)
    counts = re.search(r"\|\s*PASS.*\n.*\n\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|", out)
    assert counts is not None, out[-3000:]
    passed, _warned, failed = (int(g) for g in counts.groups())
    assert failed == 0, out[-3000:]
    assert passed > 10 and code == 0, out[-3000:]


async def _push_gpu(sim: Simulator, http: aiohttp.ClientSession) -> dict[str, Any]:
    """Push the GPU package Immediate, as the profile says; the finished task's body."""
    url = sim.bmc_url(NODE)
    async with http.post(url + PUSH, data=_form(package_for(GB200_GPU, NEW_GPU_VERSION))) as r:
        assert r.status == 202, await r.text()
        body: dict[str, Any] = await wait_task(http, url + r.headers["Location"])
        return body


async def test_a_gb200_image_runs_only_after_the_trays_power_cycle_and_fills_both_banks(
    make_sim: Factory,
) -> None:
    """nvfwupd: the push writes the image (its task completes), the tray runs it after a
    Redfish power cycle of the tray (RF_PWR_CYCLE, the profile's Chassis/BMC_0 PowerCycle),
    and background copy leaves the new image in the other bank too. A host reset is not it."""
    sim = await make_sim("nvidia-gb200-nvl")
    url, gpu = sim.bmc_url(NODE), sim.bmc(NODE).node.components["HGX_FW_GPU_0"]
    old = gpu.version
    async with aiohttp.ClientSession(headers=AUTH) as http:
        task = await _push_gpu(sim, http)
        assert task["TaskState"] == "Completed"
        member = await _get(sim, f"{FW}/HGX_FW_GPU_0")
        assert (member["Version"], member["Staged"]) == (old, True)  # written, not running
        system_reset = "/redfish/v1/Systems/System_0/Actions/ComputerSystem.Reset"
        async with http.post(url + system_reset, json={"ResetType": "ForceRestart"}) as r:
            assert r.status == 204
        assert (await _get(sim, f"{FW}/HGX_FW_GPU_0"))["Version"] == old
        chassis = await _get(sim, "/redfish/v1/Chassis/BMC_0")
        action = chassis["Actions"]["#Chassis.Reset"]
        assert action["ResetType@Redfish.AllowableValues"] == ["PowerCycle"]
        async with http.post(url + action["target"], json={"ResetType": "ForceOff"}) as r:
            assert r.status == 400  # the tray takes a power cycle only
        async with http.post(url + action["target"], json={"ResetType": "PowerCycle"}) as r:
            assert r.status == 204
        # The tray is back, running the new image, once its power cycle took its time.
        member = await until(_running(sim, NEW_GPU_VERSION), what="the power cycle")
        assert (member["Version"], member["Staged"]) == (NEW_GPU_VERSION, False)
        assert gpu.inactive_version == NEW_GPU_VERSION  # background copy
        async with http.post(
            url + "/redfish/v1/Chassis/Chassis_0/Actions/Chassis.Reset",
            json={"ResetType": "PowerCycle"},
        ) as r:
            assert r.status == 404  # only the tray's chassis takes it
    cycles = [e for e in sim.bmc(NODE).ledger if e["action"] == "Chassis.Reset"]
    assert [(e["status"], len(e.get("activated", []))) for e in cycles] == [
        (400, 0),
        (204, 4),
        (404, 0),
    ]


def _running(sim: Simulator, version: str) -> Callable[[], Awaitable[dict[str, Any] | None]]:
    async def read() -> dict[str, Any] | None:
        member = await _get(sim, f"{FW}/HGX_FW_GPU_0")
        return member if member["Version"] == version else None

    return read


async def test_the_lockstep_dialect_still_activates_in_the_push_task(make_sim: Factory) -> None:
    sim = await make_sim("lockstep")
    async with aiohttp.ClientSession(headers=AUTH) as http:
        await _push_gpu(sim, http)
        assert (await _get(sim, f"{FW}/HGX_FW_GPU_0"))["Version"] == NEW_GPU_VERSION
        async with http.get(sim.bmc_url(NODE) + "/redfish/v1/Chassis/BMC_0") as r:
            assert r.status == 404


FAST = UpdatePolicy(
    tasks=TaskPolicy(deadline_s=10, poll_s=0.01, min_poll_s=0.005, max_poll_s=0.02),
    settle_s=1.0,
    reachable_s=5.0,
    read_poll_s=0.01,
)


async def test_the_redfish_library_flashes_the_gb200_dialect_as_its_profile_says(
    make_sim: Factory,
) -> None:
    """lockstep_redfish and the simulator agree on GB200: push Immediate, the task completes,
    the read-back is not verified until the profile's activation reset (the tray's power
    cycle, found and checked against the chassis' allowed ResetTypes by ``reset``), then is."""
    sim = await make_sim("nvidia-gb200-nvl")
    profile = profile_named("nvidia-gb200-nvl")
    data = package_for(GB200_GPU, NEW_GPU_VERSION)
    image = FirmwareImage(data, hashlib.sha384(data).hexdigest(), "gpu.fwpkg")
    request = UpdateRequest((f"{FW}/HGX_FW_GPU_0",), NEW_GPU_VERSION, profile.push.apply_times[0])
    client = RedfishClient(Credentials(), RetryPolicy(timeout_s=5))
    async with client.session(BmcTarget(NODE, sim.bmc_url(NODE), allow_plain_http=True)) as bmc:
        update = FirmwareUpdate(bmc, FAST)
        plan = await update.preflight(image, request)
        task = await update.wait(await update.push(image, request, plan))
        assert task.state == "Completed"
        with pytest.raises(NotVerified):
            await update.verify(request, plan.before, within_s=0.05)
        activation = profile.activation
        assert activation.resource == "/redfish/v1/Chassis/BMC_0"
        assert activation.reset_type is not None
        assert await update.reset(activation.resource, activation.reset_type) is None  # 204
        after = await update.verify(request, plan.before, within_s=1.0)
    assert after == {f"{FW}/HGX_FW_GPU_0": NEW_GPU_VERSION}


SMC_CAPTURE = REFERENCE / "redfish-mockups" / "supermicro_hgx" / "redfish" / "v1"


async def test_the_supermicro_dialect_names_members_and_its_manager_as_the_capture_does(
    make_sim: Factory,
) -> None:
    sim = await make_sim("supermicro-x13", "hgx-h100")
    ours = {m["@odata.id"].rsplit("/", 1)[1] for m in (await _get(sim, FW))["Members"]}
    theirs = {p.name for p in (SMC_CAPTURE / "UpdateService" / "FirmwareInventory").iterdir()}
    host = {m for m in ours if not m.startswith("HGX_")}  # the HMC's keep NVIDIA's names
    assert {"BMC", "BIOS", "Backup_BMC", "Backup_BIOS", "PowerSupply1"} <= host
    assert host <= theirs, host - theirs
    bmc_member = await _get(sim, f"{FW}/BMC")
    assert bmc_member["RelatedItem"] == [{"@odata.id": "/redfish/v1/Managers/1"}]
    managers = await _get(sim, "/redfish/v1/Managers")
    assert managers["Members"] == [{"@odata.id": "/redfish/v1/Managers/1"}]
    system = await _get(sim, "/redfish/v1/Systems/System_0")
    assert system["Links"]["ManagedBy"] == managers["Members"]
    async with aiohttp.ClientSession(headers=AUTH) as http:
        bmc0 = "/redfish/v1/Managers/BMC_0/Actions/Manager.Reset"
        async with http.post(sim.bmc_url(NODE) + bmc0, json={"ResetType": "ForceRestart"}) as r:
            assert r.status == 404  # no invented manager beside the captured one


async def test_a_supermicro_bmc_flash_targets_managers_1_runs_after_its_reset_and_keeps_a_backup(
    make_sim: Factory,
) -> None:
    """As the profile says: Targets name the RelatedItem (Managers/1) with the Oem.Supermicro
    preserve flags; the new BMC image runs after Manager.Reset of Managers/1 (the library's
    ``reset``, checked against its allowed ResetTypes); Backup_BMC then holds the image it
    ran before, the inactive member the profile's bank kind reads."""
    sim = await make_sim("supermicro-x13", "hgx-h100")
    profile = profile_named("supermicro-x13")
    host_bmc = next(c for c in HGX_H100 if c.kind == "host_bmc")
    old = host_bmc.version
    params = {"Targets": ["/redfish/v1/Managers/1"], **profile.push.parameters}
    async with aiohttp.ClientSession(headers=AUTH) as http:
        url = sim.bmc_url(NODE)
        form = _form(package_for(host_bmc, "99.99.99"), json.dumps(params))
        push = (await _get(sim, "/redfish/v1/UpdateService"))["MultipartHttpPushUri"]
        assert push == "/redfish/v1/UpdateService/upload"  # as captured
        async with http.post(url + PUSH, data=_form(b"x")) as r:
            assert r.status == 404  # the simulator's own push URI is not this BMC's
        async with http.post(url + push, data=form) as r:
            assert r.status == 202, await r.text()
            assert (await wait_task(http, url + r.headers["Location"]))["TaskState"] == "Completed"
    assert (await _get(sim, f"{FW}/BMC"))["Version"] == old  # written, not running yet
    assert (await _get(sim, f"{FW}/Backup_BMC"))["Version"] == "Not Present"  # being written
    assert [e.get("targets") for e in sim.bmc(NODE).ledger if e["action"] == "upload"] == [
        [f"{FW}/BMC"]
    ]
    request = UpdateRequest((f"{FW}/BMC",), "99.99.99")
    client = RedfishClient(Credentials(), RetryPolicy(timeout_s=5))
    async with client.session(BmcTarget(NODE, sim.bmc_url(NODE), allow_plain_http=True)) as bmc:
        update = FirmwareUpdate(bmc, FAST)
        activation = profile.activation
        assert activation.resource == "/redfish/v1/Managers/1"
        assert activation.reset_type == "GracefulRestart"  # the capture allows no other
        await update.reset(activation.resource, activation.reset_type)
        after = await update.verify(request, {f"{FW}/BMC": old}, within_s=2.0)
    assert after == {f"{FW}/BMC": "99.99.99"}
    assert (await _get(sim, f"{FW}/Backup_BMC"))["Version"] == old


async def test_an_hgx_image_runs_after_the_host_systems_reset_answered_with_a_task(
    make_sim: Factory,
) -> None:
    """The nvidia-hgx profile activates by ComputerSystem.Reset ForceRestart of the host; the
    captured AMI BMC answers a reset with a Task ("Computer Reset", TaskCompletedOK), which
    lockstep_redfish's ``reset`` returns and ``wait`` follows."""
    sim = await make_sim("nvidia-hgx", "hgx-h100")
    gpu_cls = next(c for c in HGX_H100 if c.kind == "gpu")
    member, url = f"{FW}/HGX_FW_GPU_SXM_1", sim.bmc_url(NODE)
    params = json.dumps({"Targets": [member]})
    async with aiohttp.ClientSession(headers=AUTH) as http:
        async with http.post(url + PUSH, data=_form(package_for(gpu_cls, "99.1"), params)) as r:
            assert r.status == 202, await r.text()
            await wait_task(http, url + r.headers["Location"])
        assert (await _get(sim, member))["Version"] == gpu_cls.version
    profile = profile_named("nvidia-hgx")
    client = RedfishClient(Credentials(), RetryPolicy(timeout_s=5))
    async with client.session(BmcTarget(NODE, url, allow_plain_http=True)) as bmc:
        update = FirmwareUpdate(bmc, FAST)
        assert profile.activation.reset_type == "ForceRestart"
        ref = await update.reset("/redfish/v1/Systems/System_0", "ForceRestart")
        assert ref is not None  # answered with a Task, as the HGX capture's resets are
        outcome = await update.wait(ref)
    assert outcome.state == "Completed"
    assert (await _get(sim, member))["Version"] == "99.1"


async def test_a_dmtf_generic_push_is_answered_once_written_with_no_task_and_the_library_agrees(
    make_sim: Factory,
) -> None:
    """DSP0266: a synchronous 2xx means done. The dmtf-generic dialect answers its push 204 with
    no Location once the image runs; lockstep_redfish's update takes that as a task-less
    outcome and verifies by reading back within the profile's bound (taskless.wait_s)."""
    sim = await make_sim("dmtf-generic")
    url, member = sim.bmc_url(NODE), f"{FW}/HGX_FW_GPU_0"
    async with aiohttp.ClientSession(headers=AUTH) as http:
        form = _form(package_for(GB200_GPU, "97.00.9A.00.02"), json.dumps({"Targets": [member]}))
        async with http.post(url + PUSH, data=form) as r:
            assert (r.status, r.headers.get("Location")) == (204, None)
        assert (await _get(sim, member))["Version"] == "97.00.9A.00.02"  # done when answered
        assert (await _get(sim, "/redfish/v1/TaskService/Tasks"))["Members"] == []
    profile = profile_named("dmtf-generic")
    data = package_for(GB200_GPU, NEW_GPU_VERSION)
    image = FirmwareImage(data, hashlib.sha384(data).hexdigest(), "gpu.fwpkg")
    client = RedfishClient(Credentials(), RetryPolicy(timeout_s=5))
    async with client.session(BmcTarget(NODE, url, allow_plain_http=True)) as bmc:
        policy = policy_for(profile, FAST)
        result = await FirmwareUpdate(bmc, policy).update(
            image, UpdateRequest((member,), NEW_GPU_VERSION)
        )
    assert result.task is not None and result.task.taskless
    assert result.after == {member: NEW_GPU_VERSION}
    assert policy.tasks.taskless_s == profile.taskless.wait_s


async def test_a_failed_task_less_push_is_answered_with_an_error_and_changes_nothing(
    make_sim: Factory,
) -> None:
    failed = Fault("failed_flash", nodes=(NODE,), components=("HGX_FW_GPU_0",))
    sim = await make_sim("dmtf-generic", faults=FaultPlan((failed,)))
    url, member = sim.bmc_url(NODE), f"{FW}/HGX_FW_GPU_0"
    before = (await _get(sim, member))["Version"]
    async with aiohttp.ClientSession(headers=AUTH) as http:
        form = _form(package_for(GB200_GPU, NEW_GPU_VERSION), json.dumps({"Targets": [member]}))
        async with http.post(url + PUSH, data=form) as r:
            assert r.status == 500
            assert (
                "ApplyFailed" in (await r.json())["error"]["@Message.ExtendedInfo"][0]["MessageId"]
            )
    assert (await _get(sim, member))["Version"] == before
    assert [
        e.get("task_state") for e in sim.bmc(NODE).ledger if e["action"] == "update-multipart"
    ] == ["Exception"]
