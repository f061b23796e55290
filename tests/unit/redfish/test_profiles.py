"""BMC profiles as data: each shipped profile validates, is chosen for the real capture it was
built from, maps that capture's members, and says only what the capture offers."""

from __future__ import annotations

import json
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import pytest

from lockstep_common.vocabulary import Component
from lockstep_redfish.profile import (
    BankKind,
    DowngradeMode,
    ProfileError,
    PushMethod,
    ResetKind,
    parse_profile,
    profile_named,
    shipped_profiles,
)
from lockstep_redfish.selection import (
    BmcFacts,
    MemberFacts,
    facts_from,
    map_member,
    members_of,
    select_profile,
)
from tests.reference import REFERENCE

MOCKUPS = REFERENCE / "redfish-mockups"
CAPTURES = {
    "nvidia_gb200": "nvidia-gb200-nvl",
    "nvidia_gbswitch": "nvidia-gb200-nvl",
    "nvidia_viking": "nvidia-hgx",
    "supermicro_hgx": "supermicro-x13",
}


def _doc(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def capture_facts(name: str) -> BmcFacts:
    """What the capture's BMC says, as ``lockstep bmc probe`` reads it."""
    v1 = MOCKUPS / name / "redfish" / "v1"
    managers = [
        m["@odata.id"].rsplit("/", 1)[-1] for m in _doc(v1 / "Managers/index.json")["Members"]
    ]
    inventory = v1 / "UpdateService" / "FirmwareInventory"
    members = [_doc(p) for p in sorted(inventory.glob("*/index.json"))]
    return facts_from(
        _doc(v1 / "index.json"), _doc(v1 / "UpdateService/index.json"), managers, members
    )


def test_every_shipped_profile_validates_with_a_unique_id_and_a_source() -> None:
    profiles = shipped_profiles()
    assert [p.id for p in profiles] == [
        "dmtf-generic",
        "lockstep-sim",
        "nvidia-gb200-nvl",
        "nvidia-hgx",
        "supermicro-x13",
    ]
    assert all(p.source.strip() for p in profiles)


@pytest.mark.parametrize(("capture", "expected"), sorted(CAPTURES.items()))
def test_each_capture_selects_the_profile_built_from_it(capture: str, expected: str) -> None:
    selection = select_profile(capture_facts(capture))
    assert selection.profile.id == expected
    assert "dmtf-generic" in selection.candidates  # the fallback always matches, and loses


@pytest.mark.parametrize("capture", ["nvidia_gb200", "nvidia_viking", "supermicro_hgx"])
def test_the_profile_knows_every_member_of_its_capture(capture: str) -> None:
    facts = capture_facts(capture)
    profile = select_profile(facts).profile
    unknown = [m.id for m in facts.members if map_member(profile, m).label is None]
    assert unknown == []


@pytest.mark.parametrize("capture", ["nvidia_gb200", "nvidia_viking", "supermicro_hgx"])
def test_the_profile_says_only_what_its_capture_offers(capture: str) -> None:
    v1 = MOCKUPS / capture / "redfish" / "v1"
    service = _doc(v1 / "UpdateService/index.json")
    profile = select_profile(capture_facts(capture)).profile
    offered = {
        PushMethod.MULTIPART: "MultipartHttpPushUri" in service,
        PushMethod.HTTP_PUSH: "HttpPushUri" in service,
        PushMethod.SIMPLE_UPDATE: "#UpdateService.SimpleUpdate" in service.get("Actions", {}),
    }
    assert all(offered[m] for m in profile.push.methods)
    support = service.get("MultipartHttpPushUri@Redfish.OperationApplyTimeSupport")
    if support is not None:
        assert set(profile.push.apply_times) <= set(support["SupportedValues"])
    if profile.bank.kind is BankKind.COMMIT_IMAGE:
        assert profile.bank.action in capture_facts(capture).update_actions
    if profile.bank.kind is BankKind.INACTIVE_INVENTORY:
        ids = [m.id for m in capture_facts(capture).members]
        assert any(fnmatchcase(i, g) for i in ids for g in profile.bank.inactive_members)


def test_gb200_activation_is_a_power_cycle_of_a_chassis_the_capture_has() -> None:
    profile = profile_named("nvidia-gb200-nvl")
    chassis = _doc(MOCKUPS / "nvidia_gb200/redfish/v1/Chassis/index.json")["Members"]
    assert profile.activation.reset is ResetKind.CHASSIS
    assert profile.activation.reset_type == "PowerCycle"
    assert {"@odata.id": profile.activation.resource} in chassis
    assert profile.downgrade.force_parameter == "ForceUpdate"
    assert profile.push.min_gap_s > 0


def test_gb200_members_map_to_the_components_the_updater_flashes() -> None:
    facts = capture_facts("nvidia_gb200")
    profile = profile_named("nvidia-gb200-nvl")
    assert members_of(profile, Component.GPU_VBIOS, facts.members) == tuple(
        f"HGX_FW_GPU_{i}" for i in range(4)
    )
    assert members_of(profile, Component.BMC, facts.members) == ("FW_BMC_0", "HGX_FW_BMC_0")
    inforom = map_member(profile, MemberFacts("HGX_InfoROM_GPU_0"))
    assert (inforom.component, inforom.label) == (None, "inforom")


def test_supermicro_bmc_is_the_host_bmc_alone_not_the_hmc_behind_it() -> None:
    """The HMC's ``HGX_FW_BMC_0`` (no RelatedItem, no ``Backup_`` entry) is its own firmware:
    a rollout of ``bmc`` on Supermicro moves ``Managers/1``'s image, which ``Backup_BMC``
    backs, so its flip-back can run the backup bank."""
    facts = capture_facts("supermicro_hgx")
    profile = profile_named("supermicro-x13")
    assert members_of(profile, Component.BMC, facts.members) == ("BMC",)
    hmc = map_member(profile, MemberFacts("HGX_FW_BMC_0"))
    assert (hmc.component, hmc.label) == (None, "hgx_bmc")


def test_plain_member_names_map_through_ids_and_related_items() -> None:
    generic = profile_named("dmtf-generic")
    assert map_member(generic, MemberFacts("BMC")).component is Component.BMC
    assert map_member(generic, MemberFacts("BIOS")).component is Component.BIOS
    # An id nobody names, placed by what it relates to (SoftwareInventory RelatedItem).
    dell_like = MemberFacts(
        "Installed-25227-6.00.30.00__iDRAC.Embedded.1-1",
        related=("/redfish/v1/Managers/iDRAC.Embedded.1",),
    )
    assert map_member(generic, dell_like).component is Component.BMC
    assert map_member(generic, MemberFacts("Firmware.7")).label is None  # unknown, kept


def test_a_member_is_mapped_by_software_id_when_its_id_is_unknown() -> None:
    profile = profile_named("nvidia-gb200-nvl")
    renamed = MemberFacts("Renamed_0", software_id="0xC000")
    assert map_member(profile, renamed).component is Component.GPU_VBIOS


def test_a_bmc_that_says_nothing_gets_the_generic_profile() -> None:
    bare = facts_from({"RedfishVersion": "1.6.0"}, None, [], [])
    assert select_profile(bare).profile.id == "dmtf-generic"


MINIMAL = """
id = "x"
title = "x"
source = "x"
login = ["session"]
[push]
methods = ["multipart"]
[taskless]
meaning = "done"
wait_s = 10
"""


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("id = ", "not TOML"),
        (MINIMAL + "colour = 'red'\n", "colour: Extra inputs are not permitted"),
        (MINIMAL.replace('["session"]', '["telnet"]'), "login.0"),
        (MINIMAL.replace("wait_s = 10", "wait_s = 0"), "taskless.wait_s"),
        (MINIMAL + "[activation]\nreset = 'chassis'\n", "reset needs reset_type and resource"),
        (MINIMAL + "[bank]\nkind = 'commit_image'\n", "commit_image bank needs its action"),
        (
            MINIMAL + "[[members]]\ncomponent = 'toaster'\nlabel = 't'\nids = ['T']\n",
            "members.0.component",
        ),
        (MINIMAL + "[[members]]\ncomponent = 'bmc'\nlabel = 'b'\n", "has no ids"),
        (MINIMAL.replace('id = "x"', 'id = "X Y"'), "id"),
        (MINIMAL + "[downgrade]\nmode = 'forced'\n", "force_parameter goes with mode forced"),
        (
            MINIMAL + "[downgrade]\nmode = 'as_update'\nforce_parameter = 'ForceUpdate'\n",
            "force_parameter goes with mode forced",
        ),
        (MINIMAL + "[downgrade]\nmode = 'sometimes'\n", "downgrade.mode"),
    ],
)
def test_a_bad_profile_is_refused_naming_the_file_and_field(text: str, named: str) -> None:
    with pytest.raises(ProfileError) as refused:
        parse_profile(text, "bad.toml")
    assert str(refused.value).startswith("bad.toml: ")
    assert named in str(refused.value)


def test_each_shipped_profile_says_how_it_takes_an_older_image() -> None:
    """NVIDIA forces one (``ForceUpdate``); DSP0268 has no force flag, so the standard alone
    sends it as any update; Supermicro's capture offers no way: refused."""
    modes = {p.id: (p.downgrade.mode, p.downgrade.force_parameter) for p in shipped_profiles()}
    assert modes["nvidia-gb200-nvl"] == (DowngradeMode.FORCED, "ForceUpdate")
    assert modes["dmtf-generic"] == (DowngradeMode.AS_UPDATE, None)
    assert modes["supermicro-x13"] == (DowngradeMode.REFUSED, None)


def test_an_unknown_profile_name_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"no BMC profile 'dell' .*dmtf-generic"):
        profile_named("dell")


def test_docs_table_has_a_row_per_shipped_profile() -> None:
    doc = (REFERENCE.parents[2] / "docs" / "updater.md").read_text()
    rows = {line.split("|")[1].strip(" `") for line in doc.splitlines() if line.startswith("| `")}
    assert {p.id for p in shipped_profiles()} <= rows
