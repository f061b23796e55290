"""When the write side sends a push again, and when it refuses to (it may have been taken)."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from lockstep_redfish.errors import (
    BmcRefused,
    BmcUnavailable,
    ImageDigestMismatch,
    NotVerified,
    PushOutcomeUnknown,
    UpdateRefused,
)
from lockstep_redfish.image import FirmwareImage
from lockstep_redfish.preflight import Method, Preflight, UpdateRequest
from lockstep_redfish.tasks import TaskRef
from lockstep_redfish.transport import RetryPolicy
from lockstep_redfish.update import FirmwareUpdate, UpdatePolicy

from .fakes import FakeClock, ScriptedBmc, reply, task

pytestmark = pytest.mark.unit
PUSH = "/redfish/v1/UpdateService/update-multipart"
GPU0 = "/redfish/v1/UpdateService/FirmwareInventory/HGX_FW_GPU_0"
OLD, NEW = "97.00.6C.00.03", "97.00.9A.00.01"
DATA = b"PLDM package bytes"
IMAGE = FirmwareImage(DATA, hashlib.sha384(DATA).hexdigest(), "gpu.fwpkg")
REQUEST = UpdateRequest((GPU0,), NEW)
PLAN = Preflight(Method.MULTIPART, PUSH, (GPU0,), {GPU0: OLD})
POLICY = UpdatePolicy(resend=RetryPolicy(backoff_s=1.0), settle_s=30, read_poll_s=10)
ACCEPTED = reply(202, task("New"), Location="/redfish/v1/TaskService/TaskMonitors/1")


def unavailable(status: int | None, *, sent: bool = True, retry_after: float | None = None) -> Any:
    return BmcUnavailable("POST: failed", status=status, sent=sent, retry_after=retry_after)


async def push(bmc: ScriptedBmc, clock: FakeClock) -> TaskRef:
    update = FirmwareUpdate(bmc, POLICY, clock=clock, sleep=clock.sleep)
    return await update.push(IMAGE, REQUEST, PLAN)


def posts(bmc: ScriptedBmc) -> int:
    return sum(method == "POST" for method, _, _ in bmc.requests)


@pytest.mark.parametrize(
    "refusal",
    [
        unavailable(503, retry_after=7),
        unavailable(429, retry_after=7),
        unavailable(500, retry_after=7),
        unavailable(None, sent=False, retry_after=7),  # no connection: nothing was sent
    ],
    ids=["503", "429", "500", "not-connected"],
)
async def test_a_push_the_bmc_did_not_take_is_sent_again(refusal: BmcUnavailable) -> None:
    bmc, clock = ScriptedBmc(refusal, ACCEPTED), FakeClock()
    ref = await push(bmc, clock)
    assert ref.monitor == "/redfish/v1/TaskService/TaskMonitors/1"
    assert posts(bmc) == 2 and clock.slept == [7]  # Retry-After honoured
    sent = [r[2] for r in bmc.requests]
    assert all(s["retries"] == 0 and s["data"] for s in sent)  # never retried below us
    assert sent[0]["headers"]["Content-Type"].startswith("multipart/form-data; boundary=")


@pytest.mark.parametrize("status", [None, 502, 504], ids=["no-answer", "502", "504"])
async def test_a_push_that_may_have_been_taken_is_not_sent_again(status: int | None) -> None:
    bmc = ScriptedBmc(unavailable(status))
    with pytest.raises(PushOutcomeUnknown, match="may have been accepted: read the tasks"):
        await push(bmc, FakeClock())
    assert posts(bmc) == 1


async def test_sends_are_bounded_and_the_last_refusal_is_transient() -> None:
    bmc, clock = ScriptedBmc(*[unavailable(503)] * 3), FakeClock()
    with pytest.raises(BmcUnavailable) as info:
        await push(bmc, clock)
    assert not isinstance(info.value, PushOutcomeUnknown) and posts(bmc) == 3
    assert len(clock.slept) == 2


async def test_a_lost_session_logs_in_again_before_the_resend() -> None:
    bmc = ScriptedBmc(reply(401), ACCEPTED)
    await push(bmc, FakeClock())
    assert bmc.reopened == 1 and posts(bmc) == 2


async def test_a_refusal_names_the_bmcs_reason() -> None:
    error = {
        "error": {
            "code": "Base.1.19.0.GeneralError",
            "message": "x",
            "@Message.ExtendedInfo": [
                {"MessageId": "Update.1.3.0.UpdateNotApplicable", "Message": "No record."}
            ],
        }
    }
    bmc = ScriptedBmc(reply(400, error))
    with pytest.raises(BmcRefused, match=r"HTTP 400: Update.1.3.0.UpdateNotApplicable: No rec"):
        await push(bmc, FakeClock())
    assert posts(bmc) == 1


def member(version: str | None, staged: bool = False) -> Any:
    doc = {"@odata.id": GPU0, "Id": "HGX_FW_GPU_0", "Name": "GPU", "Staged": staged}
    return reply(200, doc | ({"Version": version} if version else {}), ETag='"e1"')


async def test_verify_waits_while_unchanged_then_passes() -> None:
    bmc, clock = ScriptedBmc(member(OLD), member(OLD), member(NEW)), FakeClock()
    update = FirmwareUpdate(bmc, POLICY, clock=clock, sleep=clock.sleep)
    assert await update.verify(REQUEST, {GPU0: OLD}) == {GPU0: NEW}
    assert clock.slept == [10, 10]


async def test_verify_fails_at_once_on_a_downgrade_and_after_the_settle_time_if_unchanged() -> None:
    clock = FakeClock()
    update = FirmwareUpdate(ScriptedBmc(member("97.00.52.00.01")), POLICY, sleep=clock.sleep)
    with pytest.raises(NotVerified, match="silently downgraded"):
        await update.verify(REQUEST, {GPU0: OLD})
    assert clock.slept == []
    bmc = ScriptedBmc(*[member(OLD)] * 4)
    update = FirmwareUpdate(bmc, POLICY, clock=clock, sleep=clock.sleep)
    with pytest.raises(NotVerified, match=f"unchanged at '{OLD}'"):
        await update.verify(REQUEST, {GPU0: OLD})
    assert clock.slept == [10, 10, 10]


async def test_verify_waits_for_a_dark_bmc_within_its_bound() -> None:
    dark = BmcUnavailable("GET: connection failed")
    bmc, clock = ScriptedBmc(dark, dark, member(NEW)), FakeClock()
    update = FirmwareUpdate(bmc, POLICY, clock=clock, sleep=clock.sleep)
    assert await update.verify(REQUEST, {GPU0: OLD}) == {GPU0: NEW}
    short = UpdatePolicy(reachable_s=15, read_poll_s=10)
    update = FirmwareUpdate(ScriptedBmc(*[dark] * 5), short, clock=clock, sleep=clock.sleep)
    with pytest.raises(BmcUnavailable, match="no answer for 15s"):
        await update.verify(REQUEST, {GPU0: OLD})


async def test_activate_refuses_what_is_not_staged() -> None:
    update = FirmwareUpdate(ScriptedBmc(member(OLD, staged=False)), POLICY)
    with pytest.raises(UpdateRefused, match=f"nothing staged to activate on {GPU0}"):
        await update.activate((GPU0,))


async def test_bytes_that_no_longer_match_the_attested_digest_are_not_sent() -> None:
    tampered = FirmwareImage(DATA[:-1] + b"\x00", IMAGE.digest, "gpu.fwpkg")
    bmc = ScriptedBmc(ACCEPTED)
    update = FirmwareUpdate(bmc, POLICY, clock=FakeClock(), sleep=FakeClock().sleep)
    with pytest.raises(ImageDigestMismatch, match=r"gpu\.fwpkg: SHA-384 .* nothing was sent"):
        await update.push(tampered, REQUEST, PLAN)
    assert bmc.requests == []
