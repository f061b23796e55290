"""Preflight of an HTTP push (DSP0266 "HTTP push update"): chosen only where the BMC offers
neither the multipart push nor SimpleUpdate, and refused where it cannot be told its targets
(no ``HttpPushUriTargets``: the BMC would choose them), where another client reserved them, or
where the apply time asked is not among ``HttpPushUriApplyTime``'s allowable values."""

from __future__ import annotations

import pytest

from lockstep_redfish.errors import UpdateRefused
from lockstep_redfish.preflight import Method, UpdateRequest, preflight
from tests.unit.redfish.test_preflight import GPU0, MEMBERS, service

pytestmark = pytest.mark.unit
URI = "/redfish/v1/UpdateService/update"
TO_NEW = UpdateRequest((GPU0,), "97.00.9A.00.01")


def http_only(**changes: object) -> dict[str, object]:
    base: dict[str, object] = {
        "MultipartHttpPushUri": None,
        "MultipartHttpPushUri@Redfish.OperationApplyTimeSupport": None,
        "Actions": {},
        "HttpPushUri": URI,
        "HttpPushUriTargets": [],
        "HttpPushUriTargetsBusy": False,
    }
    return {**base, **changes}


def test_http_push_is_the_last_choice() -> None:
    assert preflight(service(HttpPushUri=URI), MEMBERS, TO_NEW, 10).method is Method.MULTIPART
    plan = preflight(service(**http_only()), MEMBERS, TO_NEW, 10)
    assert (plan.method, plan.uri, plan.pending) == (Method.HTTP_PUSH, URI, (GPU0,))


@pytest.mark.parametrize(
    ("changes", "request_", "refusal"),
    [
        ({"HttpPushUriTargets": None}, TO_NEW, "cannot be told its targets"),
        ({"HttpPushUriTargetsBusy": True}, TO_NEW, "reserved by another client"),
        ({}, UpdateRequest((GPU0,), "97.00.9A.00.01", "OnReset"), "'OnReset' is not offered"),
        (
            {
                "HttpPushUriOptions": {
                    "HttpPushUriApplyTime": {"ApplyTime@Redfish.AllowableValues": ["Immediate"]}
                }
            },
            UpdateRequest((GPU0,), "97.00.9A.00.01", "OnReset"),
            r"supported: Immediate\)",
        ),
    ],
    ids=["no targets property", "busy", "no apply-time option", "not allowed"],
)
def test_an_http_push_that_cannot_be_aimed_is_refused(
    changes: dict[str, object], request_: UpdateRequest, refusal: str
) -> None:
    with pytest.raises(UpdateRefused, match=refusal):
        preflight(service(**http_only(**changes)), MEMBERS, request_, 10)


def test_an_on_reset_http_push_goes_where_the_option_allows_it() -> None:
    options = {"HttpPushUriApplyTime": {"ApplyTime": "Immediate"}}
    request = UpdateRequest((GPU0,), "97.00.9A.00.01", "OnReset")
    plan = preflight(service(**http_only(HttpPushUriOptions=options)), MEMBERS, request, 10)
    assert plan.method is Method.HTTP_PUSH
