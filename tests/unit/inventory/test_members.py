"""FirmwareInventory members of the real captures map to Lockstep components exactly, through
the BMC profile the updater would choose for the same BMC (one source of truth: the profiles'
``[[members]]`` rows), and a simulated node of every dialect reads the same to both."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any, cast

import pytest
from multidict import CIMultiDict, CIMultiDictProxy

from lockstep_common.vocabulary import Component
from lockstep_inventory.adapters.bmc_reader import BmcReader, ProfileMemo, SweepResult
from lockstep_inventory.domain.members import (
    ComponentVersions,
    Member,
    MemberStatus,
    map_member,
    versions_of,
)
from lockstep_inventory.settings import Settings
from lockstep_inventory.sweeping import report_of
from lockstep_redfish.errors import BmcError, BmcRefused, BmcUnavailable
from lockstep_redfish.models import SoftwareInventory
from lockstep_redfish.profile import BmcProfile, profile_named
from lockstep_redfish.selection import BmcFacts, facts_from, members_of, select_profile
from lockstep_redfish.session import BmcSession
from lockstep_redfish.transport import Reply
from lockstep_sim.bmc import Bmc
from lockstep_sim.dialects import DEFAULT, dialect_named, rename_members
from lockstep_sim.fleet import build_fleet
from lockstep_sim.resources import get_document
from lockstep_updater.domain.targets import component_of
from tests.reference import REFERENCE

pytestmark = pytest.mark.unit

MOCKUPS = REFERENCE / "redfish-mockups"
C = Component

# label -> component (None: explicitly not a Lockstep component, kept raw)
GB200: dict[str, tuple[Component | None, str]] = {
    "CX7_0": (C.NIC, "nic"),
    "FW_BMC_0": (C.BMC, "bmc"),
    "FW_CPLD_0": (C.CPLD, "cpld"),
    "FW_CPLD_1": (C.CPLD, "cpld"),
    "FW_CPLD_2": (C.CPLD, "cpld"),
    "FW_CPLD_3": (C.CPLD, "cpld"),
    "FW_ERoT_BMC_0": (C.EROT, "erot"),
    "HGX_FW_BMC_0": (C.BMC, "bmc"),
    "HGX_FW_CPLD_0": (None, "hgx_cpld"),
    "HGX_FW_CPU_0": (None, "cpu"),
    "HGX_FW_CPU_1": (None, "cpu"),
    "HGX_FW_ERoT_BMC_0": (C.EROT, "erot"),
    "HGX_FW_ERoT_CPU_0": (C.EROT, "erot"),
    "HGX_FW_ERoT_CPU_1": (C.EROT, "erot"),
    "HGX_FW_ERoT_FPGA_0": (C.EROT, "erot"),
    "HGX_FW_ERoT_FPGA_1": (C.EROT, "erot"),
    "HGX_FW_FPGA_0": (None, "fpga"),
    "HGX_FW_FPGA_1": (None, "fpga"),
    "HGX_FW_GPU_0": (C.GPU_VBIOS, "gpu_vbios"),
    "HGX_FW_GPU_1": (C.GPU_VBIOS, "gpu_vbios"),
    "HGX_FW_GPU_2": (C.GPU_VBIOS, "gpu_vbios"),
    "HGX_FW_GPU_3": (C.GPU_VBIOS, "gpu_vbios"),
    "HGX_InfoROM_GPU_0": (None, "inforom"),
    "HGX_InfoROM_GPU_1": (None, "inforom"),
    "HGX_InfoROM_GPU_2": (None, "inforom"),
    "HGX_InfoROM_GPU_3": (None, "inforom"),
    "HGX_PCIeSwitchConfig_0": (None, "pcie_switch"),
    "NIC_0": (C.NIC, "nic"),
    "NIC_1": (C.NIC, "nic"),
    "UEFI": (C.BIOS, "bios"),
}


def _numbered(
    prefix: str, indices: range, value: tuple[Component | None, str]
) -> dict[str, tuple[Component | None, str]]:
    return {f"{prefix}{i}": value for i in indices}


VIKING: dict[str, tuple[Component | None, str]] = {
    "CPLDMB_0": (C.CPLD, "cpld"),
    "CPLDMID_0": (C.CPLD, "cpld"),
    "EROT_BIOS_0": (None, "host_erot"),
    "EROT_BMC_0": (None, "host_erot"),
    "HGX_FW_BMC_0": (C.BMC, "bmc"),
    "HGX_FW_ERoT_BMC_0": (C.EROT, "erot"),
    "HGX_FW_ERoT_FPGA_0": (C.EROT, "erot"),
    **_numbered("HGX_FW_ERoT_GPU_SXM_", range(1, 9), (C.EROT, "erot")),
    **_numbered("HGX_FW_ERoT_NVSwitch_", range(4), (C.EROT, "erot")),
    "HGX_FW_ERoT_PCIeSwitch_0": (C.EROT, "erot"),
    "HGX_FW_FPGA_0": (None, "fpga"),
    **_numbered("HGX_FW_GPU_SXM_", range(1, 9), (C.GPU_VBIOS, "gpu_vbios")),
    **_numbered("HGX_FW_NVSwitch_", range(4), (C.NVSWITCH, "nvswitch")),
    **_numbered("HGX_FW_PCIeRetimer_", range(8), (None, "pcie_retimer")),
    "HGX_FW_PCIeSwitch_0": (None, "pcie_switch"),
    **_numbered("HGX_InfoROM_GPU_SXM_", range(1, 9), (None, "inforom")),
    **_numbered("HGX_InfoROM_NVSwitch_", range(4), (None, "inforom")),
    "HostBIOS_0": (C.BIOS, "bios"),
    "HostBMC_0": (None, "host_bmc"),
    "PCIeRetimer_0": (None, "pcie_retimer"),
    "PCIeRetimer_1": (None, "pcie_retimer"),
    "PCIeSwitch_0": (None, "pcie_switch"),
    "PCIeSwitch_1": (None, "pcie_switch"),
    **_numbered("PSU_", range(6), (C.PSU, "psu")),
}

GBSWITCH: dict[str, tuple[Component | None, str]] = {
    "CPLD_0": (C.CPLD, "cpld"),
    "MGX_FW_BMC_0": (C.BMC, "bmc"),
    "MGX_FW_CPU_0": (None, "cpu"),
    "MGX_FW_ERoT_BMC_0": (C.EROT, "erot"),
    "MGX_FW_ERoT_CPU_0": (C.EROT, "erot"),
    "MGX_FW_ERoT_FPGA_0": (C.EROT, "erot"),
    "MGX_FW_ERoT_NVSwitch_0": (C.EROT, "erot"),
    "MGX_FW_ERoT_NVSwitch_1": (C.EROT, "erot"),
    "MGX_FW_FPGA_0": (None, "fpga"),
    "MGX_FW_NVSwitch_0": (C.NVSWITCH, "nvswitch"),
    "MGX_FW_NVSwitch_1": (C.NVSWITCH, "nvswitch"),
}


SUPERMICRO: dict[str, tuple[Component | None, str]] = {
    "BMC": (C.BMC, "bmc"),
    "BIOS": (C.BIOS, "bios"),
    # Another bank's image: never the running component, so never a conflict with it.
    "Backup_BMC": (None, "backup"),
    "Backup_BIOS": (None, "backup"),
    "Golden_BMC": (None, "backup"),
    "Golden_BIOS": (None, "backup"),
    "Golden_CPLD_Motherboard": (None, "backup"),
    "Staging_BMC": (None, "staging"),
    "Staging_BIOS": (None, "staging"),
    # The HMC's firmware behind the host's BMC: its own, not the host's bmc (no conflict with it).
    "HGX_FW_BMC_0": (None, "hgx_bmc"),
    "HGX_FW_FPGA_0": (None, "fpga"),
    "HGX_FW_PCIeSwitch_0": (None, "pcie_switch"),
    **_numbered("HGX_FW_PCIeRetimer_", range(8), (None, "pcie_retimer")),
    **_numbered("HGX_InfoROM_GPU_SXM_", range(1, 9), (None, "inforom")),
    **_numbered("GPU", range(1, 9), (C.GPU_VBIOS, "gpu_vbios")),
    **_numbered("HGX_FW_NVSwitch_", range(4), (C.NVSWITCH, "hgx_nvswitch")),
    **_numbered("PowerSupply", range(1, 9), (C.PSU, "psu")),
}


def _doc(path: Path) -> Any:
    file = path / "index.json"
    return json.loads(file.read_text(encoding="utf-8")) if file.is_file() else None


def _facts(name: str) -> tuple[BmcFacts, list[Member]]:
    """What the updater's probe reads of a capture, and its members as the inventory reads them."""
    v1 = MOCKUPS / name / "redfish" / "v1"
    docs = [_doc(p) for p in sorted((v1 / "UpdateService" / "FirmwareInventory").glob("*/"))]
    managers = [m["@odata.id"].rsplit("/", 1)[-1] for m in _doc(v1 / "Managers")["Members"]]
    facts = facts_from(_doc(v1), _doc(v1 / "UpdateService"), managers, docs)
    return facts, [Member.from_redfish(d) for d in docs if d.get("Version")]


def _capture(name: str) -> tuple[BmcProfile, list[Member]]:
    facts, members = _facts(name)
    return select_profile(facts).profile, members


def _grouped(name: str) -> ComponentVersions:
    profile, members = _capture(name)
    return versions_of(members, profile)


@pytest.mark.parametrize(
    ("capture", "profile_id", "expected", "count"),
    [
        ("nvidia_gb200", "nvidia-gb200-nvl", GB200, 30),
        ("nvidia_viking", "nvidia-hgx", VIKING, 66),
        ("nvidia_gbswitch", "nvidia-gb200-nvl", GBSWITCH, 11),
        ("supermicro_hgx", "supermicro-x13", SUPERMICRO, 106),
    ],
)
def test_capture_maps_every_member_exactly(
    capture: str, profile_id: str, expected: dict[str, tuple[Component | None, str]], count: int
) -> None:
    profile, members = _capture(capture)
    assert profile.id == profile_id  # chosen as the updater's preflight chooses
    assert len(members) == count
    got = {m.id: (mapping.component, mapping.label) for m in members
           for mapping in [map_member(profile, m)]}  # fmt: skip
    assert {k: got[k] for k in expected} == expected
    assert all(label is not None for _, label in got.values())  # every member known


def test_gb200_versions_and_conflicts_are_explicit() -> None:
    result = _grouped("nvidia_gb200")
    assert result.versions == {
        C.BMC: "GB200Nvl-24.12-8",
        C.EROT: "01.03.0262.0000_n04",
        C.BIOS: "buildbrain-gcid-38635631",
    }
    # The capture itself has one GPU on another VBIOS, two CPLD images and two NIC families.
    assert result.conflicts[C.GPU_VBIOS] == {
        "HGX_FW_GPU_0": "97.00.6C.00.03",
        "HGX_FW_GPU_1": "97.00.72.00.00",
        "HGX_FW_GPU_2": "97.00.6C.00.03",
        "HGX_FW_GPU_3": "97.00.6C.00.03",
    }
    assert set(result.conflicts) == {C.GPU_VBIOS, C.CPLD, C.NIC}
    assert result.raw["HGX_InfoROM_GPU_0"] == "G548.0201.00.03"
    assert len(result.raw) == 10
    assert result.unmapped == {}


def test_viking_versions() -> None:
    result = _grouped("nvidia_viking")
    assert result.versions[C.GPU_VBIOS] == "96.00.89.00.01"
    assert result.versions[C.NVSWITCH] == "96.10.4A.00.01"
    assert result.versions[C.BMC] == "HGX-22.10-1-rc57"
    assert result.versions[C.EROT] == "00.02.0150.0000_n00"
    assert result.versions[C.PSU] == "0204.0201.0202"
    assert result.conflicts == {C.CPLD: {"CPLDMB_0": "0.2.1.8", "CPLDMID_0": "0.2.1.1"}}
    assert result.raw["HostBMC_0"] and result.raw["EROT_BMC_0"]  # the AMI host's own parts


def test_supermicro_other_banks_are_no_conflict() -> None:
    result = _grouped("supermicro_hgx")
    other_banks = {m for m in result.raw if m.startswith(("Backup_", "Golden_", "Staging_"))}
    assert len(other_banks) == 7
    assert not any(other_banks & set(by_member) for by_member in result.conflicts.values())
    assert result.versions[C.GPU_VBIOS] == "96.00.61.00.01"
    assert C.BMC in result.versions and C.BMC not in result.conflicts  # the host's BMC alone
    assert result.unmapped == {}


GB200_PROFILE = profile_named("nvidia-gb200-nvl")


def test_unknown_members_are_kept_never_dropped() -> None:
    members = {"HGX_FW_GPU_0": "1", "Mystery_Widget_7": "4.2", "PSU_0": "9"}
    result = versions_of(members, GB200_PROFILE)
    assert result.unmapped == {"Mystery_Widget_7": "4.2"}
    assert result.mappings["Mystery_Widget_7"].status is MemberStatus.UNKNOWN
    assert result.versions == {C.GPU_VBIOS: "1", C.PSU: "9"}


def test_inforom_is_explicitly_not_a_component() -> None:
    mapping = map_member(GB200_PROFILE, "HGX_InfoROM_GPU_3")
    assert mapping.status is MemberStatus.NOT_A_COMPONENT
    assert mapping.component is None
    assert map_member(GB200_PROFILE, "HGX_FW_GPU_0").status is MemberStatus.MAPPED


def test_software_id_related_item_and_oem_are_hints_of_the_rows() -> None:
    assert map_member(GB200_PROFILE, Member("odd_1", "v", software_id="0xC000")).component is (
        C.GPU_VBIOS
    )
    assert map_member(GB200_PROFILE, Member("odd_2", "v", software_id="0xDEAD")).label is None
    generic = profile_named("dmtf-generic")
    bmc = Member("iDRAC.Embedded.1", "7.0", related=("/redfish/v1/Managers/iDRAC.Embedded.1",))
    assert map_member(generic, bmc).component is C.BMC
    # A Member's Name is no hint: the updater does not read it either.
    assert map_member(GB200_PROFILE, Member("odd_3", "v", name="HGX_FW_GPU_0")).label is None


def test_a_member_showing_another_bank_is_not_the_running_component() -> None:
    """The Supermicro capture's backup, golden and staging entries carry their running twin's
    RelatedItem: counted as the component, a backup bank holding the previous image made every
    flashed node's BMC a conflict (and its stack unlike its neighbours')."""
    twin = ("/redfish/v1/Managers/1",)
    members = [
        Member("BMC", "25.03-1", related=twin),
        Member("Backup_BMC", "24.12-8", related=twin),
        Member("Golden_BMC", "24.01-1", related=twin),
        Member("Staging_BIOS", "Not Present", related=("/redfish/v1/Systems/1/Bios",)),
    ]
    result = versions_of(members, profile_named("supermicro-x13"))
    assert result.versions == {C.BMC: "25.03-1"} and result.conflicts == {}
    assert result.raw == {
        "Backup_BMC": "24.12-8",
        "Golden_BMC": "24.01-1",
        "Staging_BIOS": "Not Present",
    }


def test_specific_rows_come_before_the_generic_ones_they_would_fall_into() -> None:
    hgx = profile_named("nvidia-hgx")
    assert map_member(hgx, "EROT_BMC_0").label == "host_erot"
    assert map_member(hgx, "HGX_FW_CPLD_0").label == "hgx_cpld"
    smc = profile_named("supermicro-x13")
    assert map_member(smc, "HGX_FW_CPLD_0").label == "hgx_cpld"  # not its *_CPLD_[0-9]* row
    assert map_member(smc, "HGX_InfoROM_GPU_SXM_1").label == "inforom"  # not HGX_* "other"


def test_from_redfish_refuses_a_member_without_version() -> None:
    with pytest.raises(ValueError, match="no string Version"):
        Member.from_redfish({"Id": "HGX_FW_GPU_0"})


class _SimSession:
    """The simulator's documents of one BMC, GET only (what the reader's profile choice reads)."""

    def __init__(self, bmc: Bmc) -> None:
        self.bmc = bmc
        self.paths: list[str] = []

    async def get(self, path: str) -> Reply:
        self.paths.append(path)
        return Reply(200, CIMultiDictProxy(CIMultiDict()), get_document(self.bmc, path))


def _simulated(dialect: str, hardware: str) -> tuple[Bmc, dict[str, Any], list[dict[str, Any]]]:
    (node,) = build_fleet(1, hardware)
    rename_members(node, dialect_named(dialect))
    bmc = Bmc(node=node, username="u", password="p", time_scale=1.0, dialect=dialect_named(dialect))
    collection = get_document(bmc, "/redfish/v1/UpdateService/FirmwareInventory")
    docs = [get_document(bmc, m["@odata.id"]) for m in collection["Members"]]
    return bmc, get_document(bmc, "/redfish/v1"), docs


@pytest.mark.parametrize(
    ("dialect", "hardware", "profile_id"),
    [
        (DEFAULT, "gb200", "lockstep-sim"),
        ("dmtf-generic", "gb200", "dmtf-generic"),
        ("nvidia-gb200-nvl", "gb200", "nvidia-gb200-nvl"),
        ("nvidia-hgx", "gb200", "nvidia-hgx"),
        ("nvidia-hgx", "hgx-h100", "nvidia-hgx"),
        ("supermicro-x13", "gb200", "supermicro-x13"),
        ("supermicro-x13", "hgx-h100", "supermicro-x13"),
    ],
)
async def test_a_simulated_node_reads_the_same_to_the_inventory_and_the_updater(
    dialect: str, hardware: str, profile_id: str
) -> None:
    """The sweep's report of a fresh node of each dialect groups exactly the members the
    updater's preflight would target for each component (``NodeBmc.member_paths``)."""
    bmc, root, docs = _simulated(dialect, hardware)
    session = _SimSession(bmc)
    swept = tuple(SoftwareInventory.model_validate(d) for d in docs)
    reader = BmcReader(cast(Any, None), None, memo=ProfileMemo())
    chosen = await reader.choose_profile("n1", cast(BmcSession, session), root, swept)
    report = report_of(SweepResult("n1", True, swept, profile=chosen), 1, dt.datetime.now(dt.UTC))

    managers = get_document(bmc, "/redfish/v1/Managers")["Members"]
    facts = facts_from(
        root,
        get_document(bmc, "/redfish/v1/UpdateService"),
        [m["@odata.id"].rsplit("/", 1)[-1] for m in managers],
        docs,
    )
    updater = select_profile(facts).profile
    assert chosen == updater.id == profile_id
    version = {m.id: m.version for m in facts.members}
    for component in Component:
        targets = {m: version[m] for m in members_of(updater, component, facts.members)}
        grouped = report.conflicts.get(component) or (
            dict.fromkeys(targets, report.components[component])
            if component in report.components
            else {}
        )
        assert grouped == targets, component
    if dialect == "dmtf-generic":
        # The tray's CX7_0 is no member the generic profile names: not the NICs' conflict.
        assert C.NIC not in report.conflicts and report.components[C.NIC] == "32.41.1300"

    # Chosen once: the next sweep of the same BMC reads neither UpdateService nor Managers.
    session.paths.clear()
    assert await reader.choose_profile("n1", cast(BmcSession, session), root, swept) == chosen
    assert session.paths == []
    # A member flashed since (a BMC image may change what UpdateService offers): chosen again.
    flashed = (swept[0].model_copy(update={"Version": "flashed"}), *swept[1:])
    assert await reader.choose_profile("n1", cast(BmcSession, session), root, flashed) == chosen
    assert session.paths == ["/redfish/v1/UpdateService", "/redfish/v1/Managers"]


async def test_a_profile_named_for_the_node_wins_over_the_choice() -> None:
    """The inventory's ``bmc_profiles`` (as the updater's): the BMC is not asked at all."""
    bmc, root, docs = _simulated("nvidia-gb200-nvl", "gb200")
    session = _SimSession(bmc)
    swept = tuple(SoftwareInventory.model_validate(d) for d in docs)
    reader = BmcReader(cast(Any, None), None, named={"n1": "dmtf-generic"})
    chosen = await reader.choose_profile("n1", cast(BmcSession, session), root, swept)
    assert chosen == "dmtf-generic" and session.paths == []


class _Refusing(_SimSession):
    """A BMC without UpdateService or Managers (404), or that stops answering there."""

    def __init__(self, bmc: Bmc, error: BmcError) -> None:
        super().__init__(bmc)
        self.error = error

    async def get(self, path: str) -> Reply:
        self.paths.append(path)
        raise self.error


async def test_a_bmc_that_refuses_the_documents_the_choice_reads_is_chosen_without_them() -> None:
    """As the updater's probe reads them: a refusal (404) is a BMC without the resource, whose
    profile is chosen from the rest; one that stops answering is unreadable this sweep."""
    bmc, root, docs = _simulated("nvidia-gb200-nvl", "gb200")
    swept = tuple(SoftwareInventory.model_validate(d) for d in docs)
    reader = BmcReader(cast(Any, None), None)
    refusing = _Refusing(bmc, BmcRefused("GET /redfish/v1/UpdateService: HTTP 404", status=404))
    # The GB200 profile states an UpdateService action: without one, the generic profile.
    assert await reader.choose_profile("n1", cast(BmcSession, refusing), root, swept) == (
        "dmtf-generic"
    )
    silent = _Refusing(bmc, BmcUnavailable("GET /redfish/v1/UpdateService: no answer"))
    with pytest.raises(BmcUnavailable):
        await BmcReader(cast(Any, None), None).choose_profile(
            "n1", cast(BmcSession, silent), root, swept
        )


def test_a_malformed_hint_costs_the_hint_not_the_member() -> None:
    member = SoftwareInventory.model_validate(
        {
            "@odata.id": "/redfish/v1/UpdateService/FirmwareInventory/BMC",
            "Id": "BMC",
            "Name": "BMC",
            "Version": "1.0",
            "RelatedItem": "/redfish/v1/Managers/1",  # not a list of links
            "Oem": ["not", "an", "object"],
        }
    )
    swept = SweepResult("n1", True, (member,), profile="supermicro-x13")
    report = report_of(swept, 1, dt.datetime.now(dt.UTC))
    assert report.components == {C.BMC: "1.0"}  # its id still names it


def test_a_report_without_a_profile_is_read_as_the_updater_reads_unprofiled_members() -> None:
    """``targets.component_of`` without a profile: the shipped profiles by priority."""
    member = SoftwareInventory.model_validate(
        {"@odata.id": "/x/HGX_FW_GPU_0", "Id": "HGX_FW_GPU_0", "Name": "g", "Version": "9"}
    )
    report = report_of(SweepResult("n1", True, (member,)), 1, dt.datetime.now(dt.UTC))
    assert report.components == {C.GPU_VBIOS: "9"} == {component_of("HGX_FW_GPU_0"): "9"}


def test_the_setting_names_a_profile_per_node_then_per_sku_and_refuses_an_unknown_one() -> None:
    settings = Settings(bmc_profiles={"gb200": "nvidia-gb200-nvl", "n7": "dmtf-generic"})
    assert settings.profile_named_for("n7", "gb200") == "dmtf-generic"  # the node's id wins
    assert settings.profile_named_for("n8", "gb200") == "nvidia-gb200-nvl"
    assert settings.profile_named_for("n8", "hgx-h100") is None  # chosen from what it says
    with pytest.raises(ValueError, match=r"bmc_profiles\['gb200'\]: no BMC profile 'idrac'"):
        Settings(bmc_profiles={"gb200": "idrac"})
