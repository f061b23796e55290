"""Hardware profiles: firmware inventory templates imitating the NVIDIA Redfish captures.

Member ids, names and version formats follow ``reference/redfish-mockups/nvidia_gb200`` (GB200
NVL, 30 FirmwareInventory members) and ``nvidia_viking`` (HGX H100 on AMI). PLDM descriptors
(DSP0267 "Descriptor Identifier" table: PCI Vendor ID 0x0000, PCI Device ID 0x0100) are
invented per component class so that packages can be matched against them.
"""

from __future__ import annotations

from dataclasses import dataclass

NVIDIA_PCI_VENDOR = 0x10DE
MELLANOX_PCI_VENDOR = 0x15B3
PROFILES = ("gb200", "hgx-h100", "mixed")
# Seed 000 table: GPU VBIOS "~15 min stage + reset, back-to-back today", activation "several
# more minutes"; PSU/BBU power firmware is one-way (no A/B bank) and the long pole.
GPU_STAGE_MINUTES = 15.0
GPU_ACTIVATE_MINUTES = 5.0
PSU_ACTIVATE_MINUTES = 15.0
# BMC firmware: "stage + reset; node management blind during the flip" -- the BMC refuses
# connections for its activate_minutes (jobs._activation); reliability.md 7.D2 says 2-10 min.


@dataclass(frozen=True, slots=True, kw_only=True)
class ComponentClass:
    """One class of firmware component: every member of it shares descriptors and timing."""

    kind: str
    ids: tuple[str, ...]
    version: str
    software_id: str | None = None
    manufacturer: str | None = "NVIDIA"
    updateable: bool = True
    banks: bool = True  # A/B flash banks; one-way parts (PSU, CPLD) have none
    version_scheme: str = "OEM"  # SoftwareInventory v1_9_0 VersionScheme
    lowest_supported: str | None = None
    related_chassis: str | None = None
    pci_vendor: int = NVIDIA_PCI_VENDOR
    pci_device: int = 0
    pldm_component_id: int = 0
    stage_minutes: float = 2.0  # real BMC time to write the inactive bank
    activate_minutes: float = 1.0  # real BMC time to switch banks / reset the device

    def descriptors(self) -> tuple[tuple[int, int], ...]:
        """PLDM (type, value) descriptors of the device this class's members sit on."""
        return ((0x0000, self.pci_vendor), (0x0100, self.pci_device))


def _ids(prefix: str, indices: range) -> tuple[str, ...]:
    return tuple(f"{prefix}{i}" for i in indices)


GB200: tuple[ComponentClass, ...] = (
    ComponentClass(
        kind="nic",
        ids=("CX7_0",),
        version="28.42.1234",
        software_id="0x0001",
        manufacturer="NVIDIA",
        pci_vendor=MELLANOX_PCI_VENDOR,
        pci_device=0x1021,
        pldm_component_id=0x0001,
        version_scheme="DotIntegerNotation",
        lowest_supported="28.39.1002",
        stage_minutes=4,
        activate_minutes=1,
    ),
    ComponentClass(
        kind="bmc",
        ids=("FW_BMC_0", "HGX_FW_BMC_0"),
        version="GB200Nvl-24.12-8",
        software_id="0x0010",
        pci_device=0x1B00,
        pldm_component_id=0x0010,
        lowest_supported="GB200Nvl-24.09-4",
        related_chassis="BMC_0",
        stage_minutes=12,
        activate_minutes=4,
    ),
    ComponentClass(
        kind="cpld",
        ids=_ids("FW_CPLD_", range(4)),
        version="0x00 0x0b 0x03 0x04",
        manufacturer=None,
        banks=False,
        pci_device=0x1C00,
        pldm_component_id=0x0020,
        stage_minutes=5,
        activate_minutes=3,
    ),
    ComponentClass(
        kind="erot",
        ids=(
            "FW_ERoT_BMC_0",
            "HGX_FW_ERoT_BMC_0",
            "HGX_FW_ERoT_CPU_0",
            "HGX_FW_ERoT_CPU_1",
            "HGX_FW_ERoT_FPGA_0",
            "HGX_FW_ERoT_FPGA_1",
        ),
        version="01.03.0262.0000_n04",
        software_id="0xFF00",
        pci_device=0x1D00,
        pldm_component_id=0xFF00,
        lowest_supported="01.03.0200.0000_n04",
        stage_minutes=3,
        activate_minutes=1,
    ),
    ComponentClass(
        kind="hgx_cpld",
        ids=("HGX_FW_CPLD_0",),
        version="0.1C",
        manufacturer=None,
        banks=False,
        pci_device=0x1C01,
        pldm_component_id=0x0021,
    ),
    ComponentClass(
        kind="cpu",
        ids=("HGX_FW_CPU_0", "HGX_FW_CPU_1"),
        version="02.03.13",
        software_id="0x0038",
        pci_device=0x22B8,
        pldm_component_id=0x0038,
        version_scheme="DotIntegerNotation",
        stage_minutes=5,
        activate_minutes=2,
    ),
    ComponentClass(
        kind="fpga",
        ids=("HGX_FW_FPGA_0", "HGX_FW_FPGA_1"),
        version="1.1C",
        software_id="0x0050",
        pci_device=0x1E00,
        pldm_component_id=0x0050,
        stage_minutes=4,
        activate_minutes=2,
    ),
    ComponentClass(
        kind="gpu",
        ids=_ids("HGX_FW_GPU_", range(4)),
        version="97.00.6C.00.03",
        software_id="0xC000",
        pci_device=0x2941,
        pldm_component_id=0xC000,
        lowest_supported="97.00.52.00.01",
        stage_minutes=GPU_STAGE_MINUTES,
        activate_minutes=GPU_ACTIVATE_MINUTES,
    ),
    ComponentClass(
        kind="inforom",
        ids=_ids("HGX_InfoROM_GPU_", range(4)),
        version="G548.0201.00.03",
        software_id="0xC010",
        pci_device=0x2941,
        pldm_component_id=0xC010,
        stage_minutes=2,
        activate_minutes=1,
    ),
    ComponentClass(
        kind="pcie_switch",
        ids=("HGX_PCIeSwitchConfig_0",),
        version="01300524",
        manufacturer=None,
        banks=False,
        pci_device=0x1F00,
        pldm_component_id=0x0060,
        version_scheme="DotIntegerNotation",
    ),
    ComponentClass(
        kind="nic",
        ids=("NIC_0", "NIC_1"),
        version="32.41.1300",
        software_id="0x0001",
        pci_vendor=MELLANOX_PCI_VENDOR,
        pci_device=0x1023,
        pldm_component_id=0x0002,
        version_scheme="DotIntegerNotation",
    ),
    ComponentClass(
        kind="uefi",
        ids=("UEFI",),
        version="buildbrain-gcid-38635631",
        software_id="UEFI",
        pci_device=0x22B9,
        pldm_component_id=0x0070,
        stage_minutes=6,
        activate_minutes=5,
    ),
)

HGX_H100: tuple[ComponentClass, ...] = (
    ComponentClass(
        kind="cpld",
        ids=("CPLDMB_0", "CPLDMID_0"),
        version="0.2.1.8",
        manufacturer=None,
        banks=False,
        pci_device=0x1C10,
        pldm_component_id=0x0020,
        version_scheme="DotIntegerNotation",
        stage_minutes=5,
        activate_minutes=3,
    ),
    ComponentClass(
        kind="bmc",
        ids=("HGX_FW_BMC_0",),
        version="HGX-22.10-1-rc57",
        pci_device=0x1B10,
        pldm_component_id=0x0010,
        stage_minutes=12,
        activate_minutes=4,
    ),
    ComponentClass(
        kind="erot",
        ids=(
            "HGX_FW_ERoT_BMC_0",
            "HGX_FW_ERoT_FPGA_0",
            *_ids("HGX_FW_ERoT_GPU_SXM_", range(1, 9)),
            *_ids("HGX_FW_ERoT_NVSwitch_", range(4)),
            "HGX_FW_ERoT_PCIeSwitch_0",
        ),
        version="00.02.0150.0000_n00",
        pci_device=0x1D10,
        pldm_component_id=0xFF00,
        stage_minutes=3,
        activate_minutes=1,
    ),
    ComponentClass(
        kind="fpga",
        ids=("HGX_FW_FPGA_0",),
        version="2.37",
        pci_device=0x1E10,
        pldm_component_id=0x0050,
        version_scheme="DotIntegerNotation",
    ),
    ComponentClass(
        kind="gpu",
        ids=_ids("HGX_FW_GPU_SXM_", range(1, 9)),
        version="96.00.89.00.01",
        pci_device=0x2330,
        pldm_component_id=0xC000,
        lowest_supported="96.00.5E.00.01",
        stage_minutes=GPU_STAGE_MINUTES,
        activate_minutes=GPU_ACTIVATE_MINUTES,
    ),
    ComponentClass(
        kind="nvswitch",
        ids=_ids("HGX_FW_NVSwitch_", range(4)),
        version="96.10.4A.00.01",
        pci_device=0x22A3,
        pldm_component_id=0xC100,
        stage_minutes=6,
        activate_minutes=3,
    ),
    ComponentClass(
        kind="retimer",
        ids=_ids("HGX_FW_PCIeRetimer_", range(8)),
        version="2.7.20",
        pci_device=0x1F10,
        pldm_component_id=0x0080,
        version_scheme="DotIntegerNotation",
        stage_minutes=3,
        activate_minutes=1,
    ),
    ComponentClass(
        kind="pcie_switch",
        ids=("HGX_FW_PCIeSwitch_0",),
        version="1.7.5F",
        pci_device=0x1F11,
        pldm_component_id=0x0060,
    ),
    ComponentClass(
        kind="inforom",
        ids=_ids("HGX_InfoROM_GPU_SXM_", range(1, 9)),
        version="G520.0200.00.05",
        pci_device=0x2330,
        pldm_component_id=0xC010,
    ),
    ComponentClass(
        kind="inforom_nvswitch",
        ids=_ids("HGX_InfoROM_NVSwitch_", range(4)),
        version="G520.0200.00.05",
        pci_device=0x22A3,
        pldm_component_id=0xC110,
    ),
    ComponentClass(
        kind="bios",
        ids=("HostBIOS_0",),
        version="01.01.03",
        pci_device=0x1A10,
        manufacturer=None,
        pldm_component_id=0x0070,
        version_scheme="DotIntegerNotation",
        stage_minutes=6,
        activate_minutes=5,
    ),
    ComponentClass(
        kind="host_bmc",
        ids=("HostBMC_0",),
        version="23.11.21",
        manufacturer=None,
        pci_device=0x1A11,
        pldm_component_id=0x0011,
        version_scheme="DotIntegerNotation",
        stage_minutes=10,
        activate_minutes=4,
    ),
    ComponentClass(
        kind="psu",
        ids=_ids("PSU_", range(6)),
        version="0204.0201.0202",
        manufacturer=None,
        banks=False,
        pci_device=0x1A20,
        pldm_component_id=0x0090,
        version_scheme="DotIntegerNotation",
        stage_minutes=10,
        activate_minutes=PSU_ACTIVATE_MINUTES,
    ),
)

PROFILE_CLASSES: dict[str, tuple[ComponentClass, ...]] = {"gb200": GB200, "hgx-h100": HGX_H100}
