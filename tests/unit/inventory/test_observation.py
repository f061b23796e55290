"""Reports per source: which one wins, what is merged, what history records."""

from __future__ import annotations

import datetime as dt

import pytest

from lockstep_common.compatibility.items import drift_item
from lockstep_common.vocabulary import Component, DriftKind, ObservationSource
from lockstep_inventory.adapters.sweeper import SweepResult
from lockstep_inventory.domain.members import Member
from lockstep_inventory.domain.observation import (
    Observation,
    changes,
    from_redfish_members,
    merge,
    unreadable,
)
from lockstep_inventory.sweeping import report_of
from lockstep_redfish.models import SoftwareInventory
from lockstep_redfish.profile import profile_named

pytestmark = pytest.mark.unit
C = Component
REDFISH, AGENT = ObservationSource.REDFISH, ObservationSource.AGENT
T0 = dt.datetime(2026, 11, 21, tzinfo=dt.UTC)
GB200 = profile_named("nvidia-gb200-nvl")  # the BMC profile of the tray these members name


def redfish(seq: int, **members: str) -> Observation:
    return from_redfish_members(seq, T0, [Member(k, v) for k, v in members.items()], GB200)


def test_redfish_members_become_components_and_conflicts() -> None:
    obs = redfish(1, FW_BMC_0="b1", HGX_FW_BMC_0="b1", HGX_FW_GPU_0="g1", HGX_FW_GPU_1="g2")
    assert obs.components == {C.BMC: "b1"}
    assert obs.conflicts == {C.GPU_VBIOS: {"HGX_FW_GPU_0": "g1", "HGX_FW_GPU_1": "g2"}}
    assert obs.firmware_dirs is None  # a BMC says nothing about /lib/firmware


def test_agent_wins_in_band_components_and_redfish_the_rest() -> None:
    bmc = Observation(REDFISH, 1, T0, components={C.BMC: "b1", C.GPU_GSP: "from-bmc"})
    agent = Observation(
        AGENT,
        1,
        T0,
        components={C.GPU_GSP: "580.65.06", C.DRIVER: "580.65.06", C.BMC: "agent-guess"},
        firmware_dirs=("580.65.06",),
        loaded_module="580.65.06",
    )
    merged = merge({REDFISH: bmc, AGENT: agent})
    assert merged.actual == {C.BMC: "b1", C.GPU_GSP: "580.65.06", C.DRIVER: "580.65.06"}
    assert merged.firmware_dirs == ("580.65.06",) and merged.loaded_module == "580.65.06"
    # Either source alone fills what it knows.
    assert merge({AGENT: agent}).actual[C.BMC] == "agent-guess"


def test_a_redfish_conflict_is_not_hidden_by_an_agent_value() -> None:
    bmc = Observation(REDFISH, 1, T0, conflicts={C.GPU_VBIOS: {"G0": "a", "G1": "b"}})
    agent = Observation(AGENT, 1, T0, components={C.GPU_VBIOS: "a"})
    merged = merge({REDFISH: bmc, AGENT: agent})
    assert C.GPU_VBIOS in merged.conflicts and C.GPU_VBIOS not in merged.actual


def test_an_unreadable_report_keeps_last_known_versions_and_when_failures_began() -> None:
    good = redfish(1, FW_BMC_0="b1")
    first = unreadable(REDFISH, 2, T0 + dt.timedelta(minutes=5), "timeout").after_failure(good)
    assert not first.readable and first.members == {"FW_BMC_0": "b1"}
    assert first.unreadable_since == T0 + dt.timedelta(minutes=5)
    second = unreadable(REDFISH, 3, T0 + dt.timedelta(minutes=10), "reset").after_failure(first)
    assert second.unreadable_since == first.unreadable_since and second.error == "reset"


def test_history_records_member_changes_and_readability() -> None:
    before = redfish(1, FW_BMC_0="b1", HGX_FW_GPU_0="g1")
    after = redfish(2, FW_BMC_0="b0", NEW_PART="x")
    assert list(changes(before, after)) == [
        ("FW_BMC_0", "b1", "b0"),
        ("HGX_FW_GPU_0", "g1", None),
        ("NEW_PART", None, "x"),
    ]
    lost = unreadable(REDFISH, 3, T0, "down").after_failure(after)
    assert list(changes(after, lost)) == [("readable", "true", "false")]
    assert list(changes(None, before))[-1] == ("readable", None, "true")


def test_agent_history_includes_components_and_seed_004_evidence() -> None:
    a = Observation(
        AGENT, 1, T0, components={C.DRIVER: "1"}, loaded_module="1", firmware_dirs=("1",)
    )
    b = Observation(
        AGENT, 2, T0, components={C.DRIVER: "2"}, loaded_module="2", firmware_dirs=("1",)
    )
    assert [item for item, _, _ in changes(a, b)] == ["driver", "loaded_module"]


def test_a_bmc_version_with_control_characters_is_kept_as_an_event_can_carry_it() -> None:
    # A Version is free text on a BMC; a NUL in it must not make the sweep's drift events (or
    # PostgreSQL, which stores no NUL in text) refuse the whole chunk.
    member = SoftwareInventory.model_validate(
        {
            "@odata.id": "/redfish/v1/x/FW_BMC_0",
            "Id": "FW_BMC_0",
            "Name": "BMC",
            "Version": "24.09\x00\n",
        }
    )
    report = report_of(SweepResult("n1", readable=True, members=(member,)), 3, T0)
    assert report.members == {"FW_BMC_0": "24.09\ufffd\ufffd"}
    actual = report.components[Component.BMC]
    item = drift_item(Component.BMC, "24.10", actual, DriftKind.UNEXPECTED, "BMC differs")
    assert item.actual == "24.09\ufffd\ufffd"
