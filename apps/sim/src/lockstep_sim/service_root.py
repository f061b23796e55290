"""ServiceRoot (ServiceRoot v1_17_0), the OData service document and ``$metadata`` (DSP0266
sections "Service root" and "OData service and metadata documents")."""

from __future__ import annotations

from typing import Any

from lockstep_sim.odata import ROOT, ref

SERVICE_ENTRIES = (
    "SessionService",
    "AccountService",
    "Systems",
    "Chassis",
    "Managers",
    "TaskService",
    "UpdateService",
)

# Namespace -> schema file, for the $metadata edmx:Reference list.
_SCHEMAS = (
    "SessionService",
    "Session",
    "SessionCollection",
    "AccountService",
    "ManagerAccount",
    "ManagerAccountCollection",
    "Role",
    "RoleCollection",
    "ComputerSystem",
    "ComputerSystemCollection",
    "Chassis",
    "ChassisCollection",
    "Manager",
    "ManagerCollection",
    "TaskService",
    "Task",
    "TaskCollection",
    "UpdateService",
    "SoftwareInventory",
    "SoftwareInventoryCollection",
    "Message",
    "Resource",
    "Settings",
)


def service_root(uuid: str, bmc_name: str) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "@odata.id": f"{ROOT}/",
        "@odata.type": "#ServiceRoot.v1_17_0.ServiceRoot",
        "Id": "RootService",
        "Name": f"Root Service ({bmc_name})",
        "RedfishVersion": "1.20.0",
        "UUID": uuid,
        "Vendor": "Lockstep simulator",
        "ProtocolFeaturesSupported": {
            "ExpandQuery": {
                "ExpandAll": True,
                "Levels": True,
                "Links": True,
                "NoLinks": True,
                "MaxLevels": 1,
            },
            "FilterQuery": False,
            "SelectQuery": False,
            "OnlyMemberQuery": False,
            "ExcerptQuery": False,
            "TopSkipQuery": False,
            "DeepOperations": {"DeepPATCH": False, "DeepPOST": False},
        },
        "Links": {"Sessions": ref(f"{ROOT}/SessionService/Sessions")},
    }
    for entry in SERVICE_ENTRIES:
        # ServiceRoot names the TaskService link "Tasks" (ServiceRoot v1_0_0).
        doc["Tasks" if entry == "TaskService" else entry] = ref(f"{ROOT}/{entry}")
    return doc


def odata_document() -> dict[str, Any]:
    """The OData service document at ``/redfish/v1/odata``."""
    return {
        "@odata.context": f"{ROOT}/$metadata",
        "value": [
            {"name": "Service", "kind": "Singleton", "url": f"{ROOT}/"},
            *({"name": e, "kind": "Singleton", "url": f"{ROOT}/{e}"} for e in SERVICE_ENTRIES),
        ],
    }


def metadata_xml() -> str:
    """The CSDL ``$metadata`` document referencing the DMTF schema files used."""
    refs = "\n".join(
        f'  <edmx:Reference Uri="http://redfish.dmtf.org/schemas/v1/{s}_v1.xml">\n'
        f'    <edmx:Include Namespace="{s}"/>\n  </edmx:Reference>'
        for s in _SCHEMAS
    )
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<edmx:Edmx xmlns:edmx="http://docs.oasis-open.org/odata/ns/edmx" Version="4.0">\n'
        f"{refs}\n"
        '  <edmx:Reference Uri="http://redfish.dmtf.org/schemas/v1/ServiceRoot_v1.xml">\n'
        '    <edmx:Include Namespace="ServiceRoot"/>\n'
        '    <edmx:Include Namespace="ServiceRoot.v1_17_0"/>\n  </edmx:Reference>\n'
        "  <edmx:DataServices>\n"
        '    <Schema xmlns="http://docs.oasis-open.org/odata/ns/edm" Namespace="Service">\n'
        '      <EntityContainer Name="Service" Extends="ServiceRoot.v1_17_0.ServiceContainer"/>\n'
        "    </Schema>\n  </edmx:DataServices>\n</edmx:Edmx>\n"
    )
