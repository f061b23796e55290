"""FirmwareInventory members of the real NVIDIA captures map to Lockstep components exactly."""

from __future__ import annotations

import json

import pytest

from lockstep_common.vocabulary import Component
from lockstep_inventory.domain.members import (
    RULES,
    Member,
    MemberStatus,
    map_member,
    versions_of,
)
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


def _capture(name: str) -> list[Member]:
    root = MOCKUPS / name / "redfish" / "v1" / "UpdateService" / "FirmwareInventory"
    return [
        Member.from_redfish(json.loads(path.read_text(encoding="utf-8")))
        for path in sorted(root.glob("*/index.json"))
    ]


@pytest.mark.parametrize(
    ("capture", "expected", "count"),
    [("nvidia_gb200", GB200, 30), ("nvidia_viking", VIKING, 66), ("nvidia_gbswitch", GBSWITCH, 11)],
)
def test_capture_maps_every_member_exactly(
    capture: str, expected: dict[str, tuple[Component | None, str]], count: int
) -> None:
    members = _capture(capture)
    assert len(members) == count == len(expected)
    got = {
        m.id: (mapping.component, mapping.label)
        for m in members
        for mapping in [map_member(m.id, name=m.name, software_id=m.software_id)]
    }
    assert got == expected


def test_gb200_versions_and_conflicts_are_explicit() -> None:
    result = versions_of(_capture("nvidia_gb200"))
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
    result = versions_of(_capture("nvidia_viking"))
    assert result.versions[C.GPU_VBIOS] == "96.00.89.00.01"
    assert result.versions[C.NVSWITCH] == "96.10.4A.00.01"
    assert result.versions[C.BMC] == "HGX-22.10-1-rc57"
    assert result.versions[C.EROT] == "00.02.0150.0000_n00"
    assert result.versions[C.PSU] == "0204.0201.0202"
    assert result.conflicts == {C.CPLD: {"CPLDMB_0": "0.2.1.8", "CPLDMID_0": "0.2.1.1"}}


def test_unknown_members_are_kept_never_dropped() -> None:
    result = versions_of({"HGX_FW_GPU_0": "1", "Mystery_Widget_7": "4.2", "PSU_0": "9"})
    assert result.unmapped == {"Mystery_Widget_7": "4.2"}
    assert result.mappings["Mystery_Widget_7"].status is MemberStatus.UNKNOWN
    assert result.versions == {C.GPU_VBIOS: "1", C.PSU: "9"}


def test_inforom_is_explicitly_not_a_component() -> None:
    mapping = map_member("HGX_InfoROM_GPU_3")
    assert mapping.status is MemberStatus.NOT_A_COMPONENT
    assert mapping.component is None
    assert map_member("HGX_FW_GPU_0").status is MemberStatus.MAPPED


def test_name_then_software_id_are_fallbacks() -> None:
    assert map_member("odd_0", name="HGX_FW_GPU_SXM_1").component is C.GPU_VBIOS
    assert map_member("odd_1", software_id="0xC000").component is C.GPU_VBIOS
    assert map_member("odd_2", software_id="0xDEAD").status is MemberStatus.UNKNOWN


def test_a_member_showing_another_bank_is_not_the_running_component() -> None:
    """The Supermicro capture's backup, golden and staging entries carry their running twin's
    SoftwareId: counted as the component, a backup bank holding the previous image made every
    flashed node's BMC a conflict (and its stack unlike its neighbours')."""
    members = [
        Member("BMC", "25.03-1", software_id="0x0010"),
        Member("Backup_BMC", "24.12-8", software_id="0x0010"),
        Member("Golden_BMC", "24.01-1", software_id="0x0010"),
        Member("Staging_BIOS", "Not Present", software_id="UEFI"),
    ]
    result = versions_of(members)
    assert result.versions == {C.BMC: "25.03-1"} and result.conflicts == {}
    assert result.raw == {
        "Backup_BMC": "24.12-8",
        "Golden_BMC": "24.01-1",
        "Staging_BIOS": "Not Present",
    }


def test_rules_are_an_ordered_table_with_specific_rows_first() -> None:
    labels = [r.label for r in RULES]
    assert labels.index("host_erot") < labels.index("erot")
    assert labels.index("hgx_cpld") < labels.index("cpld")


def test_from_redfish_refuses_a_member_without_version() -> None:
    with pytest.raises(ValueError, match="no string Version"):
        Member.from_redfish({"Id": "HGX_FW_GPU_0"})
