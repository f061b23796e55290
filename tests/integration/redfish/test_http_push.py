"""The HTTP push update (DSP0266 "HTTP push update", UpdateService ``HttpPushUri``) against a
simulated BMC that offers only it (no MultipartHttpPushUri, no SimpleUpdate), as
``dmtf-generic`` lists it last: the targets and the apply time PATCHed onto UpdateService
(``HttpPushUriTargets``, reserved with ``HttpPushUriTargetsBusy`` and released after), then the
bare image POSTed once; the members read back at the new version."""

from __future__ import annotations

import dataclasses

import pytest

from lockstep_redfish.errors import UpdateRefused
from lockstep_redfish.preflight import Method, UpdateRequest
from lockstep_redfish.update import SYSTEMS, FirmwareUpdate
from lockstep_sim.simulator import Simulator
from tests.integration.redfish.test_update import (
    FAST,
    GPU0,
    GPU1,
    GPU_IMAGE,
    NODE,
    OLD,
    Factory,
    actions,
    make_sim,
    session,
    version,
)
from tests.integration.sim.pldm_fixtures import NEW_GPU_VERSION

pytestmark = pytest.mark.integration
__all__ = ["make_sim"]  # the fixture, shared with the other write-side tests
WRITES = {"patch", "update", "update-multipart", "UpdateService.SimpleUpdate"}


async def http_push_only(make_sim: Factory) -> Simulator:
    sim = await make_sim()
    bmc = sim.bmc(NODE)
    bmc.multipart_push, bmc.http_push = False, True
    bmc.dialect = dataclasses.replace(bmc.dialect, simple_update=False)
    return sim


def writes(sim: Simulator) -> list[tuple[str, object]]:
    return [
        (e["action"], e.get("http_push")) for e in sim.bmc(NODE).ledger if e["action"] in WRITES
    ]


async def test_a_bmc_offering_only_http_push_is_flashed_through_it(make_sim: Factory) -> None:
    sim = await http_push_only(make_sim)
    request = UpdateRequest((GPU0, GPU1), NEW_GPU_VERSION)
    async with session(sim) as bmc:
        update = FirmwareUpdate(bmc, FAST)
        assert (await update.preflight(GPU_IMAGE, request)).method is Method.HTTP_PUSH
        result = await update.update(GPU_IMAGE, request)
    assert result.after == {GPU0: NEW_GPU_VERSION, GPU1: NEW_GPU_VERSION}
    targets = {"HttpPushUriTargets": [GPU0, GPU1], "HttpPushUriTargetsBusy": True}
    assert writes(sim) == [
        ("patch", targets),
        ("update", True),
        ("patch", {"HttpPushUriTargetsBusy": False}),
    ]
    (push,) = actions(sim, "update", 202)
    assert push["targets"] == [GPU0, GPU1]
    assert not sim.bmc(NODE).http_push_busy  # released for the next client


async def test_an_on_reset_http_push_sets_the_apply_time_and_waits_for_the_reset(
    make_sim: Factory,
) -> None:
    sim = await http_push_only(make_sim)
    request = UpdateRequest((GPU0,), NEW_GPU_VERSION, apply_time="OnReset")
    async with session(sim) as bmc:
        update = FirmwareUpdate(bmc, FAST)
        result = await update.update(GPU_IMAGE, request)
        assert result.after is None and version(sim, GPU0) == OLD  # waits for the reset
        (system,) = await update.collection(SYSTEMS)
        await update.reset(system, "ForceRestart")
    assert version(sim, GPU0) == NEW_GPU_VERSION
    (reserve, *_) = [e for e in sim.bmc(NODE).ledger if e["action"] == "patch"]
    assert reserve["http_push"]["HttpPushUriOptions"] == {
        "HttpPushUriApplyTime": {"ApplyTime": "OnReset"}
    }


async def test_targets_reserved_by_another_client_are_not_taken_over(make_sim: Factory) -> None:
    sim = await http_push_only(make_sim)
    sim.bmc(NODE).http_push_busy = True  # another client's push in progress
    async with session(sim) as bmc:
        with pytest.raises(UpdateRefused, match=r"HttpPushUriTargets is reserved"):
            await FirmwareUpdate(bmc, FAST).update(GPU_IMAGE, UpdateRequest((GPU0,), "9"))
    assert writes(sim) == []
    assert version(sim, GPU0) == OLD
