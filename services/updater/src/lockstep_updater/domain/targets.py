"""Which Redfish ``FirmwareInventory`` members an image of a component is pushed to.

An update names its targets explicitly: an empty ``Targets`` means "every applicable device"
to a Redfish service (UpdateService ``SimpleUpdate``), a blast radius nobody chose. The member
ids are those of the NVIDIA captures (``reference/redfish-mockups``) and the simulator's
profiles; the rows restate, for the components the updater flashes, the inventory's mapping
(``lockstep_inventory.domain.members``, which the updater may not import), and a unit test
keeps them classified the same way.

A component's members are not all one device: a GB200 tray's ``CX7_0`` and ``NIC_0``/``NIC_1``
are both NICs, of two models. A PLDM package declares the devices it applies to (DSP0267
firmware device ID records: PCI vendor and device id descriptors), so the members are narrowed
to those whose device matches (``applicable_members``) before they are named as ``Targets``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from lockstep_common.pldm import PldmFormatError, parse_package
from lockstep_common.vocabulary import Component

PCI_VENDOR_ID = 0x0000  # DSP0267 descriptor types
PCI_DEVICE_ID = 0x0100
PciIds = Sequence[tuple[int, int]]
"""A device's (vendor id, device id) pairs, one per PCIe function."""

MEMBER_PATTERNS: dict[Component, re.Pattern[str]] = {
    Component.BMC: re.compile(r"^((HGX|MGX)_)?FW_BMC_\d+$"),
    Component.GPU_VBIOS: re.compile(r"^HGX_FW_GPU_(SXM_)?\d+$"),
    Component.NVSWITCH: re.compile(r"^(HGX|MGX)_FW_NVSwitch_\d+$"),
    Component.EROT: re.compile(r"^((HGX|MGX)_)?FW_ERoT_\w+$"),
    Component.CPLD: re.compile(r"^(FW_)?CPLD(MB|MID)?_\d+$"),
    Component.NIC: re.compile(r"^(CX7|NIC)_\d+$"),
    Component.BIOS: re.compile(r"^(UEFI|HostBIOS_\d+)$"),
    Component.PSU: re.compile(r"^PSU_\d+$"),
    Component.BBU: re.compile(r"^BBU_\d+$"),
}


def targets_for(component: Component, member_paths: list[str]) -> tuple[str, ...]:
    """The member paths (``.../FirmwareInventory/<id>``) that hold ``component``, sorted."""
    pattern = MEMBER_PATTERNS.get(component)
    if pattern is None:
        return ()
    return tuple(sorted(p for p in member_paths if pattern.match(p.rstrip("/").rsplit("/", 1)[-1])))


def applicable_members(image: bytes, devices: Mapping[str, PciIds | None]) -> tuple[str, ...]:
    """The member paths of ``devices`` (path -> its device's PCI ids, None when the BMC does
    not say) that the PLDM package ``image`` applies to, sorted: a member whose device matches
    one of the package's firmware device records on the PCI ids (the other descriptor types of
    a record are not known from Redfish: DSP0267 matching on the known ones), and a member whose
    device is unknown (the BMC's own matching decides, as before). An image that is not a PLDM
    package declares no devices: every member is kept."""
    try:
        package = parse_package(image)
    except PldmFormatError:
        return tuple(sorted(devices))
    kept: list[str] = []
    for path, ids in devices.items():
        descriptors = [
            d
            for vendor, device in ids or ()
            for d in ((PCI_VENDOR_ID, vendor), (PCI_DEVICE_ID, device))
        ]
        if ids is None or package.matching_records(descriptors, partial=True):
            kept.append(path)
    return tuple(sorted(kept))
