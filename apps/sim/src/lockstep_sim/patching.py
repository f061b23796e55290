"""PATCH with ETag preconditions (DSP0266 "ETags" and "Modification requests": If-Match
mismatch -> 412 PreconditionFailed; read-only or unknown properties -> 400)."""

from __future__ import annotations

import re
from typing import Any

from lockstep_sim import inventory, systems
from lockstep_sim.accounts import ACCOUNTS, ROLE_IDS
from lockstep_sim.bmc import Bmc, etag
from lockstep_sim.errors import RedfishError, bad_request
from lockstep_sim.odata import ROOT
from lockstep_sim.resources import get_document, software_images

# path regex -> {writable property: expected type}
WRITABLE: list[tuple[re.Pattern[str], dict[str, type]]] = [
    (re.compile(systems.SYSTEM), {"AssetTag": str}),
    (
        re.compile(f"{ACCOUNTS}/(?P<id>[^/]+)"),
        {"Password": str, "UserName": str, "RoleId": str, "Enabled": bool},
    ),
    (re.compile(f"{inventory.FIRMWARE}/(?P<id>[^/]+)"), {"WriteProtected": bool}),
    # Manager v1_6_0 Links.ActiveSoftwareImage (ReadWrite): the image the BMC runs after its
    # next reset; only where the dialect shows a backup bank for it (choose_image).
    (re.compile(f"{ROOT}/Managers/(?P<id>[^/]+)"), {"Links": dict}),
    # DSP0266 "HTTP push update": where the next HttpPushUri image goes, reserved while set
    (
        re.compile(f"{ROOT}/UpdateService"),
        {"HttpPushUriTargets": list, "HttpPushUriTargetsBusy": bool, "HttpPushUriOptions": dict},
    ),
]


def writable(path: str) -> dict[str, type] | None:
    return next((w for p, w in WRITABLE if p.fullmatch(path)), None)


def apply_patch(
    bmc: Bmc, path: str, body: dict[str, Any], if_match: str | None, note: dict[str, Any]
) -> dict[str, Any]:
    """Check the precondition and the body, apply it, return the new document."""
    current = get_document(bmc, path)
    if if_match is not None and if_match not in {"*", etag(current)}:
        raise RedfishError(
            412,
            "PreconditionFailed",
            "The ETag supplied did not match the ETag required to change this resource.",
        )
    allowed = writable(path) or {}
    for name, value in body.items():
        if name.startswith("@odata."):
            continue
        if name not in current:
            raise bad_request(
                "PropertyUnknown",
                f"The property {name} is not in the list of valid properties for the resource.",
                name,
            )
        if name not in allowed:
            raise bad_request(
                "PropertyNotWritable",
                f"The property {name} is a read only property and cannot be assigned a value.",
                name,
            )
        if not isinstance(value, allowed[name]):
            raise bad_request(
                "PropertyValueTypeError",
                f"The value for {name} is of a different type than the property can accept.",
                str(value),
                name,
            )
    note["properties"] = sorted(k for k in body if k != "Password")
    if path.startswith(ACCOUNTS):
        _patch_account(bmc, path.rsplit("/", 1)[1], body)
    elif "AssetTag" in body:
        bmc.asset_tag = body["AssetTag"]
    elif "Links" in body:
        choose_image(bmc, path, body["Links"])
        note["links"] = body["Links"]
    elif path == f"{ROOT}/UpdateService":
        _patch_http_push(bmc, body)
        note["http_push"] = {k: v for k, v in body.items() if not k.startswith("@")}
    elif "WriteProtected" in body:
        bmc.node.components[path.rsplit("/", 1)[1]].write_protected = body["WriteProtected"]
    return get_document(bmc, path)


def choose_image(bmc: Bmc, device: str, links: dict[str, Any]) -> None:
    """``Links.ActiveSoftwareImage`` set to one of the device's ``SoftwareImages``: its backup
    entry runs the image kept there at the next reset (the running one: that choice undone)."""
    images = software_images(bmc, device)
    wanted = links.get("ActiveSoftwareImage")
    target = wanted.get("@odata.id") if isinstance(wanted, dict) else None
    listed = [i["@odata.id"] for i in (images or {}).get("SoftwareImages", [])]
    if set(links) != {"ActiveSoftwareImage"} or images is None or target not in listed:
        raise bad_request(
            "PropertyValueNotInList",
            "ActiveSoftwareImage must name one of the SoftwareImages.",
            str(target),
            "Links/ActiveSoftwareImage",
        )
    running, backup = listed
    primary = running.rsplit("/", 1)[1]
    component = bmc.node.components[primary]
    if target == running:
        if primary in bmc.backup_next:
            bmc.backup_next.discard(primary)
            bmc.pending_reset.remove(primary)
            component.staged = False
        return
    if component.inactive_version is None or component.staged:
        raise bad_request(
            "PropertyValueConflict",
            f"{backup} holds no image to run.",
            "Links/ActiveSoftwareImage",
            str(target),
        )
    component.staged = True  # the other bank's image runs at the next reset (Bmc.reset)
    bmc.backup_next.add(primary)
    bmc.pending_reset.append(primary)


def _patch_account(bmc: Bmc, account_id: str, body: dict[str, Any]) -> None:
    account = bmc.accounts.by_id[account_id]
    if body.get("RoleId", account.role) not in ROLE_IDS:
        raise bad_request(
            "PropertyValueNotInList",
            "RoleId is not a predefined role.",
            str(body["RoleId"]),
            "RoleId",
        )
    account.password = body.get("Password", account.password)  # never logged or recorded
    account.username = body.get("UserName", account.username)
    account.role = body.get("RoleId", account.role)
    account.enabled = body.get("Enabled", account.enabled)


def _patch_http_push(bmc: Bmc, body: dict[str, Any]) -> None:
    """``HttpPushUriTargets`` (URIs), ``HttpPushUriTargetsBusy`` and
    ``HttpPushUriOptions.HttpPushUriApplyTime.ApplyTime`` (one the dialect takes)."""
    targets = body.get("HttpPushUriTargets", bmc.http_push_targets)
    if not all(isinstance(t, str) for t in targets):
        raise bad_request("PropertyValueTypeError", "HttpPushUriTargets are URIs.", "Targets")
    option = body.get("HttpPushUriOptions", {}).get("HttpPushUriApplyTime", {})
    apply_time = option.get("ApplyTime", bmc.http_push_apply_time)
    if apply_time not in bmc.dialect.apply_times:
        raise bad_request(
            "PropertyValueNotInList", f"ApplyTime {apply_time!r} is not supported.", "ApplyTime"
        )
    bmc.http_push_targets = list(targets)
    bmc.http_push_busy = body.get("HttpPushUriTargetsBusy", bmc.http_push_busy)
    bmc.http_push_apply_time = apply_time
