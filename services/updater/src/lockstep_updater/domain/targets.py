"""Which Redfish ``FirmwareInventory`` members an image of a component is pushed to.

An update names its targets explicitly: an empty ``Targets`` means "every applicable device"
to a Redfish service (UpdateService ``SimpleUpdate``), a blast radius nobody chose. The member
ids are those of the NVIDIA captures (``reference/redfish-mockups``) and the simulator's
profiles; the rows restate, for the components the updater flashes, the inventory's mapping
(``lockstep_inventory.domain.members``, which the updater may not import), and a unit test
keeps them classified the same way.
"""

from __future__ import annotations

import re

from lockstep_common.vocabulary import Component

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
