"""FirmwareInventory members (SoftwareInventory v1_13_0: Active/Staged from v1_12_0,
VersionScheme from v1_9_0) and the collection."""

from __future__ import annotations

from typing import Any

from lockstep_sim.fleet import FirmwareComponent
from lockstep_sim.odata import ROOT, collection, ref, status
from lockstep_sim.pcie import device_path, is_pcie
from lockstep_sim.systems import CHASSIS

FIRMWARE = f"{ROOT}/UpdateService/FirmwareInventory"


def firmware_collection_doc(member_ids: list[str]) -> dict[str, Any]:
    return collection(
        FIRMWARE,
        "SoftwareInventoryCollection",
        "Firmware Inventory Collection",
        [f"{FIRMWARE}/{m}" for m in member_ids],
    )


def member_doc(component: FirmwareComponent) -> dict[str, Any]:
    cls = component.cls
    path = f"{FIRMWARE}/{component.id}"
    # The device the member's firmware runs on, where the emulator has one (lockstep_sim.pcie).
    related = [ref(CHASSIS), *([ref(device_path(component.id))] if is_pcie(component) else [])]
    doc: dict[str, Any] = {
        "@odata.id": path,
        "@odata.type": "#SoftwareInventory.v1_13_0.SoftwareInventory",
        "Id": component.id,
        "Name": component.id,
        "Version": component.version,
        "Updateable": cls.updateable,
        "WriteProtected": component.write_protected,
        "LowestSupportedVersion": cls.lowest_supported,
        "VersionScheme": cls.version_scheme,
        "Status": status(health=component.health),
        "RelatedItem": related,
        "RelatedItem@odata.count": len(related),
        "Active": True,
        "Staged": component.staged,
        "ResetRequiredOnUpdate": cls.kind in {"bmc", "uefi", "bios", "cpld"},
        "Actions": {
            "#SoftwareInventory.Activate": {
                "target": f"{path}/Actions/SoftwareInventory.Activate",
            }
        },
    }
    if component.bricked:  # fault "bricked": the device no longer answers the BMC
        doc["Status"] = status("UnavailableOffline", "Critical")
        del doc["Version"]
    if cls.software_id is not None:
        doc["SoftwareId"] = cls.software_id
    if cls.manufacturer is not None:
        doc["Manufacturer"] = cls.manufacturer
    return doc
