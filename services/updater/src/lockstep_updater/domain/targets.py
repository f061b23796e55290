"""Which Redfish ``FirmwareInventory`` members an image of a component is pushed to.

An update names its targets explicitly: an empty ``Targets`` means "every applicable device"
to a Redfish service (UpdateService ``SimpleUpdate``), a blast radius nobody chose. Which
member holds which component is data: the member rows of the BMC's profile
(``lockstep_redfish/profiles/*.toml``, ``lockstep_redfish.selection.map_member``). Without a
profile chosen for the node, each member is read by the shipped profiles in order of their
``priority`` and the first that knows its id decides; a unit test keeps that classification
the same as the inventory's (``lockstep_inventory.domain.members``, which the updater may not
import) for the simulator's members.

A component's members are not all one device: a GB200 tray's ``CX7_0`` and ``NIC_0``/``NIC_1``
are both NICs, of two models. A PLDM package declares the devices it applies to (DSP0267
firmware device ID records: PCI vendor and device id descriptors), so the members are narrowed
to those whose device matches (``applicable_members``) before they are named as ``Targets``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from lockstep_common.pldm import PldmFormatError, parse_package
from lockstep_common.vocabulary import Component
from lockstep_redfish.profile import BmcProfile
from lockstep_redfish.selection import MemberFacts, map_member, map_member_shipped

PCI_VENDOR_ID = 0x0000  # DSP0267 descriptor types
PCI_DEVICE_ID = 0x0100
PciIds = Sequence[tuple[int, int]]
"""A device's (vendor id, device id) pairs, one per PCIe function."""


def component_of(member_id: str, profile: BmcProfile | None = None) -> Component | None:
    """The component ``member_id`` holds under ``profile`` (None: the shipped profiles)."""
    member = MemberFacts(member_id)
    found = map_member(profile, member) if profile else map_member_shipped(member)
    return found.component


def targets_for(
    component: Component, member_paths: list[str], profile: BmcProfile | None = None
) -> tuple[str, ...]:
    """The member paths (``.../FirmwareInventory/<id>``) that hold ``component``, sorted."""
    return tuple(
        sorted(
            p
            for p in member_paths
            if component_of(p.rstrip("/").rsplit("/", 1)[-1], profile) is component
        )
    )


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
