"""The GET side of every emulated URI: path pattern -> pure document builder."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from lockstep_sim import accounts, inventory, pcie, service_root, sessions, systems, tasks
from lockstep_sim.bmc import Bmc
from lockstep_sim.dialects import shape_update_service
from lockstep_sim.errors import not_found
from lockstep_sim.fleet import FirmwareComponent
from lockstep_sim.odata import ROOT
from lockstep_sim.update_service import HTTP_PUSH_URI, update_service_doc

Getter = Callable[[Bmc, re.Match[str]], dict[str, Any]]
MAX_IMAGE_BYTES = 64 * 1024 * 1024


def _session(bmc: Bmc, m: re.Match[str]) -> dict[str, Any]:
    session = bmc.sessions.get(m["id"])
    if session is None:
        raise not_found(m.string)
    return sessions.session_doc(session)


def _account(bmc: Bmc, m: re.Match[str]) -> dict[str, Any]:
    account = bmc.accounts.by_id.get(m["id"])
    if account is None:
        raise not_found(m.string)
    return accounts.account_doc(account)


def _role(_: Bmc, m: re.Match[str]) -> dict[str, Any]:
    if m["id"] not in accounts.ROLE_IDS:
        raise not_found(m.string)
    return accounts.role_doc(m["id"])


def _task(bmc: Bmc, m: re.Match[str]) -> dict[str, Any]:
    task = bmc.tasks.get(m["id"])
    if task is None:
        raise not_found(m.string)
    return tasks.task_doc(task)


def _member(bmc: Bmc, m: re.Match[str]) -> dict[str, Any]:
    backup = _backup(bmc, m["id"])
    if backup is not None:
        return backup
    component = bmc.node.components.get(m["id"])
    if component is None:
        raise not_found(m.string)
    doc = inventory.member_doc(component)
    related = bmc.dialect.related.get(component.id)
    if related is not None:  # as the captured BMC says it (Supermicro's BMC: Managers/1)
        doc.update({"RelatedItem": [{"@odata.id": related}], "RelatedItem@odata.count": 1})
    if not bmc.dialect.activate:
        doc["Actions"].pop("#SoftwareInventory.Activate", None)
    return doc


def _backup(bmc: Bmc, member_id: str) -> dict[str, Any] | None:
    """A dialect's backup member: the other bank of its primary (Supermicro Backup_BMC)."""
    for primary, (backup_id, name) in bmc.dialect.backups.items():
        component = bmc.node.components.get(primary)
        if backup_id != member_id or component is None:
            continue
        doc = inventory.member_doc(component)
        path = f"{inventory.FIRMWARE}/{backup_id}"
        # An image being written to the other bank is not there yet; one chosen to run again is.
        held = not component.staged or primary in bmc.backup_next
        version = component.inactive_version if held else None
        related = bmc.dialect.related.get(primary)
        doc.update(
            {
                "@odata.id": path,
                "Id": backup_id,
                "Name": name,
                "Version": version or "Not Present",
                "Active": False,
                "Staged": False,
                "Actions": {},
            }
        )
        doc.pop("Oem", None)
        if related is not None:
            doc.update({"RelatedItem": [{"@odata.id": related}], "RelatedItem@odata.count": 1})
        return doc
    return None


def _firmware(bmc: Bmc) -> dict[str, Any]:
    members = list(bmc.node.components)
    backups = [b for p, (b, _n) in bmc.dialect.backups.items() if p in bmc.node.components]
    return inventory.firmware_collection_doc(members + backups)


def _pcie(bmc: Bmc, m: re.Match[str]) -> FirmwareComponent:
    component = bmc.node.components.get(m["id"])
    if component is None or not pcie.is_pcie(component):
        raise not_found(m.string)
    return component


def _managers(bmc: Bmc, _: re.Match[str]) -> dict[str, Any]:
    doc = systems.managers_doc(bmc.dialect.manager_id)
    extra = [{"@odata.id": f"{ROOT}/Managers/{i}"} for i in bmc.dialect.extra_managers]
    members = doc["Members"] + extra
    return {**doc, "Members": members, "Members@odata.count": len(members)}


def _extra_manager(bmc: Bmc, m: re.Match[str]) -> dict[str, Any]:
    """The BMC's manager under the dialect's id, or a dialect's second manager (the HGX
    baseboard's HMC beside the host BMC)."""
    if m["id"] == bmc.dialect.manager_id:
        return _manager(bmc, m)
    if m["id"] not in bmc.dialect.extra_managers:
        raise not_found(m.string)
    doc = {k: v for k, v in _manager(bmc, m).items() if k != "Actions"}  # reset: the host BMC's
    return {**doc, "@odata.id": f"{ROOT}/Managers/{m['id']}", "Id": m["id"]}


def _system(bmc: Bmc, _: re.Match[str]) -> dict[str, Any]:
    doc = systems.system_doc(bmc.node.id, bmc.uuid, bmc.power, bmc.asset_tag)
    manager = {"@odata.id": f"{ROOT}/Managers/{bmc.dialect.manager_id}"}
    return {**doc, "Links": {**doc["Links"], "ManagedBy": [manager]}}


def _extra_chassis(bmc: Bmc, m: re.Match[str]) -> dict[str, Any]:
    if m["id"] not in bmc.dialect.extra_chassis:
        raise not_found(m.string)
    return systems.reset_chassis_doc(m["id"], bmc.node.id, bmc.dialect.chassis_reset_types)


def _manager(bmc: Bmc, _: re.Match[str]) -> dict[str, Any]:
    bmc_fw = next((c.version for c in bmc.node.components.values() if c.cls.kind == "bmc"), "")
    doc = systems.manager_doc(
        bmc.uuid, bmc_fw, tasks.now_iso(), bmc.dialect.manager_id, bmc.dialect.manager_reset_types
    )
    images = software_images(bmc, doc["@odata.id"])
    if images is not None:
        doc["Links"].update(images)
    return doc


def software_images(bmc: Bmc, device: str) -> dict[str, Any] | None:
    """``Links.ActiveSoftwareImage`` and ``SoftwareImages`` of a device whose member keeps a
    backup bank (Manager v1_6_0; the Supermicro capture's Managers/1 lists BMC, Backup_BMC,
    ...): the image it runs, or the backup chosen to run at the next reset."""
    for primary, (backup_id, _name) in bmc.dialect.backups.items():
        if bmc.dialect.related.get(primary) != device or primary not in bmc.node.components:
            continue
        running = f"{inventory.FIRMWARE}/{primary}"
        backup = f"{inventory.FIRMWARE}/{backup_id}"
        active = backup if primary in bmc.backup_next else running
        return {
            "ActiveSoftwareImage": {"@odata.id": active},
            "SoftwareImages": [{"@odata.id": running}, {"@odata.id": backup}],
            "SoftwareImages@odata.count": 2,
        }
    return None


def _update_service(b: Bmc) -> dict[str, Any]:
    doc = shape_update_service(
        update_service_doc(MAX_IMAGE_BYTES, multipart=b.multipart_push), b.dialect
    )
    if b.http_push:  # DSP0266 "HTTP push update" (UpdateService v1_2_0 / v1_4_0 properties)
        doc["HttpPushUri"] = HTTP_PUSH_URI
        doc["HttpPushUriTargets"] = list(b.http_push_targets)
        doc["HttpPushUriTargetsBusy"] = b.http_push_busy
        doc["HttpPushUriOptions"] = {
            "HttpPushUriApplyTime": {
                "ApplyTime": b.http_push_apply_time,
                "ApplyTime@Redfish.AllowableValues": list(b.dialect.apply_times),
            }
        }
    return doc


_TABLE: list[tuple[str, Getter]] = [
    ("/redfish", lambda _b, _m: {"v1": f"{ROOT}/"}),
    (ROOT, lambda b, _m: {**service_root.service_root(b.uuid, b.node.id), **b.dialect.root}),
    (f"{ROOT}/odata", lambda _b, _m: service_root.odata_document()),
    (f"{ROOT}/SessionService", lambda _b, _m: sessions.session_service_doc()),
    (sessions.SESSIONS, lambda b, _m: sessions.sessions_doc(b.sessions)),
    (f"{sessions.SESSIONS}/(?P<id>[^/]+)", _session),
    (f"{ROOT}/AccountService", lambda _b, _m: accounts.account_service_doc()),
    (accounts.ACCOUNTS, lambda b, _m: accounts.accounts_doc(b.accounts)),
    (f"{accounts.ACCOUNTS}/(?P<id>[^/]+)", _account),
    (accounts.ROLES, lambda _b, _m: accounts.roles_doc()),
    (f"{accounts.ROLES}/(?P<id>[^/]+)", _role),
    (f"{ROOT}/Systems", lambda _b, _m: systems.systems_doc()),
    (systems.SYSTEM, _system),
    (f"{ROOT}/Chassis", lambda b, _m: systems.chassis_collection_doc(b.dialect.extra_chassis)),
    (systems.CHASSIS, lambda b, _m: systems.chassis_doc(b.node.id, b.node.rack)),
    (
        pcie.PCIE,
        lambda b, _m: pcie.pcie_collection_doc(
            [m for m, c in b.node.components.items() if pcie.is_pcie(c)]
        ),
    ),
    (f"{pcie.PCIE}/(?P<id>[^/]+)", lambda b, m: pcie.pcie_device_doc(_pcie(b, m))),
    (
        f"{pcie.PCIE}/(?P<id>[^/]+)/PCIeFunctions",
        lambda b, m: pcie.functions_doc(_pcie(b, m).id),
    ),
    (
        f"{pcie.PCIE}/(?P<id>[^/]+)/PCIeFunctions/0",
        lambda b, m: pcie.function_doc(_pcie(b, m)),
    ),
    (f"{ROOT}/Managers", _managers),
    (f"{ROOT}/Managers/(?P<id>[^/]+)", _extra_manager),
    (f"{systems.CHASSIS_ROOT}/(?P<id>[^/]+)", _extra_chassis),
    (f"{ROOT}/TaskService", lambda _b, _m: tasks.task_service_doc(tasks.now_iso())),
    (tasks.TASKS, lambda b, _m: tasks.tasks_doc(list(b.tasks))),
    (f"{tasks.TASKS}/(?P<id>[^/]+)", _task),
    (f"{ROOT}/UpdateService", lambda b, _m: _update_service(b)),
    (inventory.FIRMWARE, lambda b, _m: _firmware(b)),
    (f"{inventory.FIRMWARE}/(?P<id>[^/]+)", _member),
]
GETTERS: list[tuple[re.Pattern[str], Getter]] = [
    (re.compile(re.escape(p) if "(?P" not in p else p), g) for p, g in _TABLE
]


def find_getter(path: str) -> tuple[Getter, re.Match[str]] | None:
    for pattern, getter in GETTERS:
        m = pattern.fullmatch(path)
        if m is not None:
            return getter, m
    return None


def get_document(bmc: Bmc, path: str) -> dict[str, Any]:
    """The document at ``path``; raises a 404 RedfishError when there is none."""
    found = find_getter(path)
    if found is None:
        raise not_found(path)
    getter, m = found
    return getter(bmc, m)


def expand(bmc: Bmc, doc: dict[str, Any], query: str) -> dict[str, Any]:
    """``$expand`` (DSP0266 "Query parameters"): ``*``, ``.`` or ``~`` with ``$levels=1``.

    Only collection members are expanded, one level deep.
    """
    if "Members" not in doc or not re.fullmatch(r"[*.~](\(\$levels=1\))?", query):
        return doc
    members = [get_document(bmc, ref["@odata.id"]) for ref in doc["Members"]]
    return {**doc, "Members": members}
