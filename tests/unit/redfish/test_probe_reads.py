"""What ``probe.read_facts`` reads (the updater's preflight reads the same): a resource the BMC
does not have is left out, but a BMC that did not answer is not a BMC without the resource:
it is raised, so a preflight retries instead of refusing a component it never read."""

from __future__ import annotations

from typing import Any, cast

import pytest
from multidict import CIMultiDict, CIMultiDictProxy

from lockstep_redfish.errors import BmcRefused, BmcUnavailable
from lockstep_redfish.probe import read_facts
from lockstep_redfish.session import BmcSession
from lockstep_redfish.transport import Reply

pytestmark = pytest.mark.unit
FW = "/redfish/v1/UpdateService/FirmwareInventory"
DOCS: dict[str, Any] = {
    "/redfish/v1/UpdateService": {"MultipartHttpPushUri": "/push"},
    "/redfish/v1/Managers": {"Members": [{"@odata.id": "/redfish/v1/Managers/BMC_0"}]},
    FW: {"Members": [{"@odata.id": f"{FW}/GPU_0"}, {"@odata.id": f"{FW}/GPU_1"}]},
    f"{FW}/GPU_0": {"Id": "GPU_0", "Version": "1"},
}


class Bmc:
    def __init__(self, missing: Exception) -> None:
        self.missing = missing

    async def get(self, path: str) -> Reply:
        if path not in DOCS:
            raise self.missing
        return Reply(200, CIMultiDictProxy(CIMultiDict()), DOCS[path])


async def test_a_member_the_bmc_refuses_is_left_out() -> None:
    bmc = cast(BmcSession, Bmc(BmcRefused("GET: HTTP 404", url="x", status=404)))
    facts = await read_facts(bmc, {})
    assert [m.id for m in facts.members] == ["GPU_0"]


async def test_a_member_the_bmc_did_not_answer_for_is_raised_not_left_out() -> None:
    bmc = cast(BmcSession, Bmc(BmcUnavailable("GET: no answer", url="x")))
    with pytest.raises(BmcUnavailable):
        await read_facts(bmc, {})
