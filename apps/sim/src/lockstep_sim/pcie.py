"""PCIe devices (PCIeDevice v1_14_0, PCIeFunction v1_6_0) under the chassis: one per NIC
firmware member, named as the member, whose function shows the PCI vendor and device ids the
member's PLDM descriptors carry (``ComponentClass.descriptors``).

The NIC members' ``RelatedItem`` links them (SoftwareInventory ``RelatedItem``: "the ID of the
resources associated with this software inventory item"), so a client can tell which members a
PLDM package applies to before it names them as ``Targets``: the package's firmware device
records hold PCI vendor and device id descriptors (DSP0267 types 0x0000 and 0x0100), the
function its ``VendorId`` and ``DeviceId``. NVIDIA's HGX captures link members to their devices
the same way (``HGX_FW_GPU_SXM_1`` to its Processor); the GB200 capture leaves NIC members'
``RelatedItem`` empty.
"""

from __future__ import annotations

from typing import Any

from lockstep_sim.fleet import FirmwareComponent
from lockstep_sim.odata import collection, ref, status
from lockstep_sim.systems import CHASSIS

PCIE = f"{CHASSIS}/PCIeDevices"
PCIE_KINDS = frozenset({"nic"})
"""Component kinds whose members are PCIe devices of their own here."""


def is_pcie(component: FirmwareComponent) -> bool:
    return component.cls.kind in PCIE_KINDS


def device_path(member_id: str) -> str:
    return f"{PCIE}/{member_id}"


def pcie_collection_doc(member_ids: list[str]) -> dict[str, Any]:
    return collection(
        PCIE, "PCIeDeviceCollection", "PCIe Devices", [device_path(m) for m in member_ids]
    )


def pcie_device_doc(component: FirmwareComponent) -> dict[str, Any]:
    path = device_path(component.id)
    return {
        "@odata.id": path,
        "@odata.type": "#PCIeDevice.v1_14_0.PCIeDevice",
        "Id": component.id,
        "Name": f"{component.id} PCIe device",
        "Manufacturer": component.cls.manufacturer or "NVIDIA",
        "FirmwareVersion": component.version,
        "Status": status(),
        "PCIeFunctions": ref(f"{path}/PCIeFunctions"),
        "Links": {"Chassis": [ref(CHASSIS)]},
    }


def functions_doc(member_id: str) -> dict[str, Any]:
    path = f"{device_path(member_id)}/PCIeFunctions"
    return collection(path, "PCIeFunctionCollection", "PCIe Functions", [f"{path}/0"])


def function_doc(component: FirmwareComponent) -> dict[str, Any]:
    device = device_path(component.id)
    return {
        "@odata.id": f"{device}/PCIeFunctions/0",
        "@odata.type": "#PCIeFunction.v1_6_0.PCIeFunction",
        "Id": "0",
        "Name": f"{component.id} function 0",
        "FunctionId": 0,
        "VendorId": f"0x{component.cls.pci_vendor:04X}",
        "DeviceId": f"0x{component.cls.pci_device:04X}",
        "Status": status(),
        "Links": {"PCIeDevice": ref(device)},
    }
