"""UpdateService (UpdateService v1_17_0: MultipartHttpPushUri v1_6_0, Stage and Activate
v1_16_0) and the pure planning of a PLDM (DSP0267) package onto a node's inventory."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from lockstep_common.pldm import PldmFormatError, parse_package
from lockstep_sim.errors import RedfishError, bad_request
from lockstep_sim.fleet import Node
from lockstep_sim.inventory import FIRMWARE
from lockstep_sim.odata import ROOT, ref, status

UPDATE = f"{ROOT}/UpdateService"
PUSH_URI = f"{UPDATE}/update-multipart"
HTTP_PUSH_URI = f"{UPDATE}/update"  # HttpPushUri, where a BMC offers it (Bmc.http_push)
APPLY_TIMES = ["Immediate", "OnReset"]


def update_service_doc(max_image_bytes: int, *, multipart: bool = True) -> dict[str, Any]:
    apply_support = {"SupportedValues": APPLY_TIMES}
    doc: dict[str, Any] = {
        "@odata.id": UPDATE,
        "@odata.type": "#UpdateService.v1_17_0.UpdateService",
        "Id": "UpdateService",
        "Name": "Update Service",
        "ServiceEnabled": True,
        "Status": status(),
        "MaxImageSizeBytes": max_image_bytes,
        "MultipartHttpPushUri": PUSH_URI,
        "MultipartHttpPushUri@Redfish.OperationApplyTimeSupport": apply_support,
        "SupportedUpdateImageFormats": ["PLDMv1_0", "PLDMv1_1", "PLDMv1_2", "PLDMv1_3"],
        "FirmwareInventory": ref(FIRMWARE),
        "Actions": {
            "#UpdateService.SimpleUpdate": {
                "target": f"{UPDATE}/Actions/UpdateService.SimpleUpdate",
                "TransferProtocol@Redfish.AllowableValues": ["HTTP"],
                "@Redfish.OperationApplyTimeSupport": apply_support,
            },
            "#UpdateService.Activate": {"target": f"{UPDATE}/Actions/UpdateService.Activate"},
        },
    }
    if not multipart:  # a BMC before UpdateService v1_6_0: SimpleUpdate only
        del (
            doc["MultipartHttpPushUri"],
            doc["MultipartHttpPushUri@Redfish.OperationApplyTimeSupport"],
        )
    return doc


@dataclass(frozen=True, slots=True)
class UpdateOptions:
    """The ``UpdateParameters`` / ``SimpleUpdate`` parameters this emulator honours."""

    targets: tuple[str, ...] = ()
    force: bool = False
    stage: bool = False
    apply_time: str = "Immediate"


def parse_options(body: dict[str, Any]) -> UpdateOptions:
    """Validate ``Targets``, ``ForceUpdate``, ``Stage`` and ``@Redfish.OperationApplyTime``."""
    targets = body.get("Targets", [])
    if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
        raise bad_request(
            "ActionParameterValueError", "Targets must be an array of URIs.", "Targets"
        )
    force, stage = body.get("ForceUpdate", False), body.get("Stage", False)
    if not isinstance(force, bool) or not isinstance(stage, bool):
        raise bad_request(
            "PropertyValueTypeError", "ForceUpdate and Stage must be booleans.", "Stage"
        )
    apply_time = body.get("@Redfish.OperationApplyTime", "Immediate")
    if apply_time not in APPLY_TIMES:
        raise bad_request(
            "ActionParameterValueError",
            f"@Redfish.OperationApplyTime {apply_time!r} is not supported.",
            "@Redfish.OperationApplyTime",
        )
    return UpdateOptions(tuple(targets), force, stage, apply_time)


def target_members(node: Node, targets: tuple[str, ...]) -> list[str]:
    """Member ids named by ``Targets`` (all members when empty); 400 for unknown URIs."""
    if not targets:
        return list(node.components)
    out: list[str] = []
    for uri in targets:
        member = uri.rstrip("/").removeprefix(f"{FIRMWARE}/")
        if member not in node.components:
            raise bad_request(
                "ActionParameterValueError",
                f"Target {uri} is not a firmware inventory item.",
                uri,
                "Targets",
            )
        out.append(member)
    return out


def plan_update(node: Node, image: bytes, options: UpdateOptions) -> dict[str, str]:
    """member id -> new version for every targeted member the package applies to.

    A device record applies when all its descriptors are among the member's device
    descriptors (DSP0267 "Firmware device ID records"); the component whose identifier
    equals the member's PLDM ComponentIdentifier gives the new version.
    """
    try:
        package = parse_package(image)
    except PldmFormatError as exc:
        raise RedfishError(
            400,
            "VerificationFailed",
            f"The image is not a valid PLDM package: {exc}",
            ("UpdateFile", str(exc)),
        ) from None
    plan: dict[str, str] = {}
    for member_id in target_members(node, options.targets):
        component = node.components[member_id]
        if not component.cls.updateable or component.write_protected:
            continue
        for record in package.matching_records(component.cls.descriptors()):
            for image_info in package.components_for(record):
                if image_info.identifier == component.cls.pldm_component_id:
                    plan[member_id] = image_info.version.text
    if not plan:
        raise RedfishError(
            400,
            "UpdateNotApplicable",
            f"Package {package.header.version.text!r} has no device record matching the "
            "descriptors of any targeted component.",
            ("UpdateFile", node.id),
        )
    if not options.force:
        plan = {m: v for m, v in plan.items() if v != node.components[m].version}
    return plan


def check_image_uri(uri: str) -> str:
    """``SimpleUpdate`` fetches only ``http://`` from a literal 127.0.0.0/8 address."""
    parts = urlsplit(uri)
    try:
        host_ok = ipaddress.ip_address(parts.hostname or "").is_loopback
    except ValueError:
        host_ok = False
    if parts.scheme != "http" or not host_ok:
        raise bad_request(
            "ActionParameterValueError",
            "ImageURI must be an http:// URI on a loopback address.",
            uri,
            "ImageURI",
        )
    return uri
