"""One ComputerSystem (v1_20_0), one Chassis (v1_25_0) and one Manager (v1_19_0) per BMC,
minimal but schema-valid, each with a Reset action (DSP0268 ``Resource.ResetType``)."""

from __future__ import annotations

from typing import Any

from lockstep_sim.odata import ROOT, collection, ref, status

SYSTEM = f"{ROOT}/Systems/System_0"
CHASSIS_ROOT = f"{ROOT}/Chassis"
CHASSIS = f"{CHASSIS_ROOT}/Chassis_0"
MANAGER = f"{ROOT}/Managers/BMC_0"
RESET_TYPES = ["On", "ForceOff", "GracefulShutdown", "GracefulRestart", "ForceRestart"]


def systems_doc() -> dict[str, Any]:
    return collection(f"{ROOT}/Systems", "ComputerSystemCollection", "Systems", [SYSTEM])


def chassis_collection_doc(extra: tuple[str, ...] = ()) -> dict[str, Any]:
    members = [CHASSIS, *(f"{CHASSIS_ROOT}/{i}" for i in extra)]
    return collection(CHASSIS_ROOT, "ChassisCollection", "Chassis", members)


def reset_chassis_doc(
    chassis_id: str, node_id: str, reset_types: tuple[str, ...]
) -> dict[str, Any]:
    """A dialect's chassis that takes ``Chassis.Reset`` (the GB200 tray's BMC_0)."""
    path = f"{CHASSIS_ROOT}/{chassis_id}"
    return {
        "@odata.id": path,
        "@odata.type": "#Chassis.v1_25_0.Chassis",
        "Id": chassis_id,
        "Name": f"{node_id} {chassis_id}",
        "ChassisType": "Module",
        "Status": status(),
        "Actions": {
            "#Chassis.Reset": {
                "target": f"{path}/Actions/Chassis.Reset",
                "ResetType@Redfish.AllowableValues": list(reset_types),
            }
        },
    }


def managers_doc(manager_id: str = "BMC_0") -> dict[str, Any]:
    return collection(
        f"{ROOT}/Managers", "ManagerCollection", "Managers", [f"{ROOT}/Managers/{manager_id}"]
    )


def system_doc(node_id: str, uuid: str, power: str, asset_tag: str) -> dict[str, Any]:
    return {
        "@odata.id": SYSTEM,
        "@odata.type": "#ComputerSystem.v1_20_0.ComputerSystem",
        "Id": "System_0",
        "Name": node_id,
        "SystemType": "Physical",
        "AssetTag": asset_tag,
        "Manufacturer": "NVIDIA",
        "UUID": uuid,
        "PowerState": power,
        "Status": status(),
        "Links": {"Chassis": [ref(CHASSIS)], "ManagedBy": [ref(MANAGER)]},
        "Actions": {
            "#ComputerSystem.Reset": {
                "target": f"{SYSTEM}/Actions/ComputerSystem.Reset",
                "ResetType@Redfish.AllowableValues": RESET_TYPES,
            }
        },
    }


def chassis_doc(node_id: str, rack: str) -> dict[str, Any]:
    return {
        "@odata.id": CHASSIS,
        "@odata.type": "#Chassis.v1_25_0.Chassis",
        "Id": "Chassis_0",
        "Name": f"{node_id} chassis",
        "ChassisType": "RackMount",
        "Manufacturer": "NVIDIA",
        "Location": {"PartLocation": {"ServiceLabel": rack}},
        "Status": status(),
        "PCIeDevices": ref(f"{CHASSIS}/PCIeDevices"),
        "Links": {"ComputerSystems": [ref(SYSTEM)], "ManagedBy": [ref(MANAGER)]},
    }


def manager_doc(
    uuid: str,
    firmware: str,
    now: str,
    manager_id: str = "BMC_0",
    reset_types: tuple[str, ...] = ("GracefulRestart", "ForceRestart"),
) -> dict[str, Any]:
    path = f"{ROOT}/Managers/{manager_id}"
    return {
        "@odata.id": path,
        "@odata.type": "#Manager.v1_19_0.Manager",
        "Id": manager_id,
        "Name": "OpenBmc Manager",
        "ManagerType": "BMC",
        "UUID": uuid,
        "FirmwareVersion": firmware,
        "DateTime": now,
        "Status": status(),
        "Links": {"ManagerForServers": [ref(SYSTEM)], "ManagerForChassis": [ref(CHASSIS)]},
        "Actions": {
            "#Manager.Reset": {
                "target": f"{path}/Actions/Manager.Reset",
                "ResetType@Redfish.AllowableValues": list(reset_types),
            }
        },
    }
