"""Redfish errors in Lockstep's hierarchy: which are retried, which are dead-lettered."""

from __future__ import annotations

import pytest

from lockstep_common.errors import (
    Disposition,
    LockstepError,
    PermanentError,
    TransientError,
    disposition_for,
)
from lockstep_redfish.errors import (
    BmcError,
    BmcRefused,
    BmcUnavailable,
    BmcUntrusted,
    CredentialError,
    ImageDigestMismatch,
    NotVerified,
    PushOutcomeUnknown,
    RedfishReplyError,
    ResourceChanged,
    TaskDeadlineExceeded,
    TaskFailed,
    TaskUnreachable,
    UpdateRefused,
    status_error,
)

pytestmark = pytest.mark.unit
URL = "https://10.0.0.7/redfish/v1/UpdateService"


def _fate(error: BaseException) -> Disposition:
    return disposition_for(error, delivery=1, max_deliver=5)


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (BmcUnavailable(f"GET {URL}: no answer within 10s (after 3 attempts)"), Disposition.RETRY),
        (BmcRefused(f"POST {URL}: authentication failed (HTTP 401)"), Disposition.DEAD_LETTER),
        (RedfishReplyError(URL, "Members[0].Version", "bad"), Disposition.DEAD_LETTER),
        (CredentialError("no BMC credentials for n1 in /etc/bmc.json"), Disposition.DEAD_LETTER),
        (BmcUntrusted(f"GET {URL}: TLS certificate not trusted"), Disposition.DEAD_LETTER),
        # The write side: a stale ETag or a BMC dark mid-task is worth another look later;
        # a refusal, a bad digest, a push that may have been taken, a failed, stuck or
        # unverified update never are (a retry could flash twice).
        (ResourceChanged(f"PATCH {URL}: HTTP 412"), Disposition.RETRY),
        (TaskUnreachable(f"task {URL}: no answer"), Disposition.RETRY),
        (UpdateRefused("update refused: too big"), Disposition.DEAD_LETTER),
        (ImageDigestMismatch("image x: SHA-256 differs"), Disposition.DEAD_LETTER),
        (PushOutcomeUnknown(f"push to {URL}: no answer"), Disposition.DEAD_LETTER),
        (TaskFailed(f"task {URL} ended Exception"), Disposition.DEAD_LETTER),
        (TaskDeadlineExceeded(f"task {URL} still Running"), Disposition.DEAD_LETTER),
        (NotVerified("update to '1' not verified"), Disposition.DEAD_LETTER),
    ],
    ids=lambda v: type(v).__name__,
)
def test_each_error_has_one_ack_decision(error: BaseException, expected: Disposition) -> None:
    assert isinstance(error, LockstepError)
    assert _fate(error) is expected


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (401, BmcUnavailable),  # inside a session: it expired or the BMC restarted
        (429, BmcUnavailable),
        (500, BmcUnavailable),
        (502, BmcUnavailable),
        (503, BmcUnavailable),
        (504, BmcUnavailable),
        (400, BmcRefused),
        (403, BmcRefused),
        (404, BmcRefused),
        (405, BmcRefused),
        (501, BmcRefused),
        (204, BmcRefused),
    ],
)
def test_status_error_kinds(status: int, kind: type[BmcError]) -> None:
    error = status_error("GET", URL, status)

    assert type(error) is kind
    assert str(error) == f"GET {URL}: HTTP {status}"  # the sweep's per-node error text
    assert error.context == {"url": URL, "status": status}
    transient = kind is BmcUnavailable
    assert isinstance(error, TransientError) is transient
    assert isinstance(error, PermanentError) is not transient
    assert _fate(error) is (Disposition.RETRY if transient else Disposition.DEAD_LETTER)


def test_a_failed_if_match_is_a_changed_resource() -> None:
    error = status_error("PATCH", URL, 412)
    assert type(error) is ResourceChanged
    assert str(error) == f"PATCH {URL}: HTTP 412: changed since it was read (ETag)"
    assert _fate(error) is Disposition.RETRY


def test_a_transient_bmc_error_is_dead_lettered_on_the_last_delivery() -> None:
    error = BmcUnavailable(f"GET {URL}: HTTP 503 (after 3 attempts)")
    assert disposition_for(error, delivery=5, max_deliver=5) is Disposition.DEAD_LETTER


def test_reply_error_keeps_its_fields_and_message() -> None:
    error = RedfishReplyError(URL, "Members[2].Version", "Input should be a valid string")

    assert str(error) == (
        f"malformed reply from {URL}: Members[2].Version: Input should be a valid string"
    )
    assert (error.url, error.field, error.problem) == (
        URL,
        "Members[2].Version",
        "Input should be a valid string",
    )
    assert isinstance(error, BmcError)
