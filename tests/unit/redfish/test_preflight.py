"""The checks made on the BMC's own answers before an update sends anything."""

from __future__ import annotations

from typing import Any

import pytest

from lockstep_redfish.errors import UpdateRefused
from lockstep_redfish.models import UpdatableSoftware, UpdateService, parse
from lockstep_redfish.preflight import Method, UpdateRequest, preflight

pytestmark = pytest.mark.unit
FW = "/redfish/v1/UpdateService/FirmwareInventory"
GPU0, GPU1 = f"{FW}/HGX_FW_GPU_0", f"{FW}/HGX_FW_GPU_1"
PUSH = "/redfish/v1/UpdateService/update-multipart"
SIMPLE = "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate"


def service(**changes: Any) -> UpdateService:
    doc: dict[str, Any] = {
        "@odata.type": "#UpdateService.v1_17_0.UpdateService",
        "ServiceEnabled": True,
        "MaxImageSizeBytes": 1000,
        "MultipartHttpPushUri": PUSH,
        "MultipartHttpPushUri@Redfish.OperationApplyTimeSupport": {
            "SupportedValues": ["Immediate", "OnReset"]
        },
        "Actions": {"#UpdateService.SimpleUpdate": {"target": SIMPLE}},
    }
    doc.update(changes)
    return parse(UpdateService, {k: v for k, v in doc.items() if v is not None}, "u")


def member(path: str, version: str = "97.00.6C.00.03", **changes: Any) -> UpdatableSoftware:
    doc = {
        "@odata.id": path,
        "Id": path.rsplit("/", 1)[1],
        "Name": "GPU",
        "Version": version,
        "Updateable": True,
        "WriteProtected": False,
        "LowestSupportedVersion": "97.00.52.00.01",
        "VersionScheme": "OEM",
        **changes,
    }
    return parse(UpdatableSoftware, doc, path)


MEMBERS = {GPU0: member(GPU0), GPU1: member(GPU1)}
REQUEST = UpdateRequest((GPU0, GPU1), "97.00.9A.00.01")


def refusal(
    svc: UpdateService, members: dict[str, UpdatableSoftware], size: int = 100, **kw: Any
) -> str:
    request = UpdateRequest((GPU0, GPU1), "97.00.9A.00.01", **kw)
    with pytest.raises(UpdateRefused) as info:
        preflight(svc, members, request, size)
    return str(info.value)


def test_a_clean_update_goes_to_the_multipart_uri_for_every_pending_target() -> None:
    plan = preflight(service(), MEMBERS, REQUEST, 1000)
    assert (plan.method, plan.uri) == (Method.MULTIPART, PUSH)
    assert plan.pending == (GPU0, GPU1)
    assert plan.before == {GPU0: "97.00.6C.00.03", GPU1: "97.00.6C.00.03"}


def test_without_a_multipart_uri_simple_update_is_the_fallback() -> None:
    plan = preflight(service(MultipartHttpPushUri=None), MEMBERS, REQUEST, 10)
    assert (plan.method, plan.uri) == (Method.SIMPLE_UPDATE, SIMPLE)
    with pytest.raises(UpdateRefused, match="neither MultipartHttpPushUri nor SimpleUpdate"):
        preflight(service(MultipartHttpPushUri=None, Actions={}), MEMBERS, REQUEST, 10)


def test_targets_already_at_the_version_need_no_write_and_no_checks() -> None:
    at = {GPU0: member(GPU0, "97.00.9A.00.01", Updateable=False), GPU1: member(GPU1)}
    plan = preflight(service(), at, REQUEST, 10)
    assert plan.pending == (GPU1,)  # GPU0 is not Updateable, but nothing is written to it
    done = {GPU0: member(GPU0, "97.00.9A.00.01", Updateable=False)}
    plan = preflight(service(), done, UpdateRequest((GPU0,), "97.00.9A.00.01"), 10**9)
    assert plan.pending == ()


def test_every_problem_is_named_in_one_refusal() -> None:
    members = {
        GPU0: member(GPU0, Updateable=False, WriteProtected=True),
        GPU1: member(GPU1, LowestSupportedVersion="97.00.A0.00.01"),
    }
    text = refusal(service(ServiceEnabled=False), members, size=1001, apply_time="OnTargetReset")
    assert text == (
        "update refused: UpdateService is disabled (ServiceEnabled false); "
        "the image is 1001 bytes, over MaxImageSizeBytes 1000; "
        "@Redfish.OperationApplyTime 'OnTargetReset' is not offered for multipart "
        "(supported: Immediate, OnReset); "
        f"{GPU0} is not Updateable; {GPU0} is WriteProtected; "
        f"{GPU1}: version '97.00.9A.00.01' is below LowestSupportedVersion '97.00.A0.00.01'"
    )


def test_a_version_that_cannot_be_ordered_against_the_floor_is_refused() -> None:
    members = {GPU0: member(GPU0), GPU1: member(GPU1, LowestSupportedVersion="GB300-1")}
    assert refusal(service(), members).endswith(
        f"{GPU1}: version '97.00.9A.00.01' cannot be ordered against "
        "LowestSupportedVersion 'GB300-1'"
    )


def test_a_device_without_a_version_is_refused() -> None:
    members = {GPU0: member(GPU0), GPU1: member(GPU1, Version=None)}
    assert "reports no Version" in refusal(service(), members)


def test_stage_needs_update_service_1_16_and_apply_times_need_advertising() -> None:
    old = service(**{"@odata.type": "#UpdateService.v1_11_0.UpdateService"})
    assert "Stage needs UpdateService v1_16_0" in refusal(old, MEMBERS, stage=True)
    staged = UpdateRequest((GPU0,), "97.00.9A.00.01", stage=True)
    assert preflight(service(), MEMBERS, staged, 1).pending == (GPU0,)
    silent = service(**{"MultipartHttpPushUri@Redfish.OperationApplyTimeSupport": None})
    assert "(supported: Immediate)" in refusal(silent, MEMBERS, apply_time="OnReset")


def test_requests_name_their_targets() -> None:
    with pytest.raises(ValueError, match="at least one target"):
        UpdateRequest((), "1")  # an empty Targets would mean every device
    with pytest.raises(ValueError, match="paths on the BMC"):
        UpdateRequest(("https://bmc/redfish/v1/x",), "1")
    with pytest.raises(ValueError, match="version"):
        UpdateRequest((GPU0,), "")
