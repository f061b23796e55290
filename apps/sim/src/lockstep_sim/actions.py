"""Mutating handlers (POST/PATCH/DELETE), kept thin: validate, call the BMC, answer.

Each handler fills ``note`` with ledger details; the server appends exactly one ledger entry
per mutating call.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from aiohttp import web

from lockstep_sim import accounts, inventory, sessions, systems, tasks
from lockstep_sim.bmc import Bmc
from lockstep_sim.dialects import COMMIT_IMAGE, target_member
from lockstep_sim.errors import RedfishError, bad_request, not_found
from lockstep_sim.odata import ROOT
from lockstep_sim.resources import MAX_IMAGE_BYTES
from lockstep_sim.update_service import (
    HTTP_PUSH_URI,
    PUSH_URI,
    UPDATE,
    check_image_uri,
    parse_options,
    plan_update,
    target_members,
)

BMC_REBOOT_MINUTES = 2.0  # Manager.Reset: the BMC refuses connections while it boots
Handler = Callable[[web.Request, Bmc, re.Match[str], dict[str, Any]], Awaitable[web.Response]]


def json_response(doc: dict[str, Any], status: int = 200, **headers: str) -> web.Response:
    return web.json_response(
        doc, status=status, headers={"OData-Version": "4.0", "Cache-Control": "no-cache", **headers}
    )


async def read_json(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json() if request.can_read_body else {}
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise bad_request(
            "MalformedJSON", "The request body submitted was malformed JSON."
        ) from None
    if not isinstance(body, dict):
        raise bad_request("MalformedJSON", "The request body must be a JSON object.")
    return body


def task_accepted(bmc: Bmc, task: tasks.Task) -> web.Response:
    """202 + Location of the task monitor (DSP0266 "Asynchronous operations")."""
    location = f"{tasks.MONITORS}/{task.id}"
    return json_response(
        tasks.task_doc(task), 202, Location=location, **{"Retry-After": bmc.retry_after}
    )


async def create_session(
    request: web.Request, bmc: Bmc, _: re.Match[str], note: dict[str, Any]
) -> web.Response:
    body = await read_json(request)
    user, password = body.get("UserName"), body.get("Password")
    if not isinstance(user, str) or not isinstance(password, str):
        raise bad_request("PropertyMissing", "UserName and Password are required.", "UserName")
    note["username"] = user
    account = bmc.accounts.check(user, password)
    if account is None:
        raise RedfishError(401, "NoValidSession", "Invalid username or password.")
    session = bmc.sessions.create(user, account.role)
    note["session"] = session.id
    location = f"{sessions.SESSIONS}/{session.id}"
    return json_response(
        sessions.session_doc(session), 201, Location=location, **{"X-Auth-Token": session.token}
    )


async def create_account(
    request: web.Request, bmc: Bmc, _: re.Match[str], note: dict[str, Any]
) -> web.Response:
    """POST to the Accounts collection (ManagerAccount v1_12_0; DSP0266 "POST (create)")."""
    body = await read_json(request)
    user, password = body.get("UserName"), body.get("Password")
    role = body.get("RoleId", "ReadOnly")
    if not isinstance(user, str) or not isinstance(password, str) or not user:
        raise bad_request("PropertyMissing", "UserName and Password are required.", "UserName")
    if role not in accounts.ROLE_IDS:
        raise bad_request(
            "PropertyValueNotInList", "RoleId is not a predefined role.", str(role), "RoleId"
        )
    if bmc.accounts.by_name(user) is not None:
        raise RedfishError(
            409,
            "ResourceAlreadyExists",
            f"Account {user} already exists.",
            ("ManagerAccount", "UserName", user),
        )
    account = bmc.accounts.add(user, password, role)
    note.update(username=user, account=account.id, role=role)
    doc = accounts.account_doc(account)
    return json_response(doc, 201, Location=doc["@odata.id"])


async def delete_account(
    _r: web.Request, bmc: Bmc, m: re.Match[str], note: dict[str, Any]
) -> web.Response:
    account = bmc.accounts.by_id.get(m["id"])
    if account is None:
        raise not_found(m.string)
    if account.id == "1":
        raise RedfishError(400, "OperationNotAllowed", "The initial account cannot be deleted.")
    note["account"] = account.id
    del bmc.accounts.by_id[account.id]
    for session_id in [
        s.id for s in bmc.sessions.by_token.values() if s.username == account.username
    ]:
        bmc.sessions.delete(session_id)
    return web.Response(status=204, headers={"OData-Version": "4.0"})


async def delete_session(
    _r: web.Request, bmc: Bmc, m: re.Match[str], note: dict[str, Any]
) -> web.Response:
    note["session"] = m["id"]
    session = bmc.sessions.get(m["id"])
    if session is None:
        raise not_found(m.string)
    doc = sessions.session_doc(session)
    bmc.sessions.delete(m["id"])
    return json_response(doc)


async def multipart_push(
    request: web.Request, bmc: Bmc, _: re.Match[str], note: dict[str, Any]
) -> web.Response:
    """``MultipartHttpPushUri``: parts ``UpdateParameters`` (JSON) and ``UpdateFile``."""
    if not bmc.multipart_push or request.path != bmc.dialect.push_uri:
        raise not_found(request.path)
    if not request.content_type.startswith("multipart/"):
        raise bad_request(
            "ActionParameterMissing",
            "A multipart/form-data body is required.",
            "UpdateFile",
            "MultipartHttpPushUri",
        )
    params: dict[str, Any] = {}
    image: bytes | None = None
    reader = await request.multipart()
    async for part in reader:
        if not isinstance(part, aiohttp.BodyPartReader):
            continue
        if part.name == "UpdateParameters":
            try:
                params = json.loads(await part.text() or "{}")
            except json.JSONDecodeError:
                raise bad_request("MalformedJSON", "UpdateParameters is not valid JSON.") from None
        elif part.name == "UpdateFile":
            image = bytes(await part.read())
    if image is None:
        raise bad_request(
            "ActionParameterMissing",
            "The UpdateFile part is missing.",
            "UpdateFile",
            "MultipartHttpPushUri",
        )
    return await _start_update(bmc, image, params if isinstance(params, dict) else {}, note)


async def http_push(
    request: web.Request, bmc: Bmc, _: re.Match[str], note: dict[str, Any]
) -> web.Response:
    """``HttpPushUri`` (DSP0266 "HTTP push update"): the body is the image, applied to the
    ``HttpPushUriTargets`` at the apply time PATCHed onto UpdateService before."""
    if not bmc.http_push:
        raise not_found(request.path)
    image = await request.read()
    params = {
        "Targets": list(bmc.http_push_targets),
        "@Redfish.OperationApplyTime": bmc.http_push_apply_time,
    }
    note["http_push"] = True
    return await _start_update(bmc, image, params, note)


async def simple_update(
    request: web.Request, bmc: Bmc, _: re.Match[str], note: dict[str, Any]
) -> web.Response:
    """``UpdateService.SimpleUpdate``: fetch ``ImageURI`` (loopback HTTP only) and apply it."""
    if not bmc.dialect.simple_update:
        raise not_found(request.path)
    body = await read_json(request)
    uri = body.get("ImageURI")
    if not isinstance(uri, str):
        raise bad_request(
            "ActionParameterMissing", "ImageURI is required.", "SimpleUpdate", "ImageURI"
        )
    note["image_uri"] = check_image_uri(uri)
    timeout = aiohttp.ClientTimeout(total=30)
    try:
        async with aiohttp.ClientSession(timeout=timeout) as client, client.get(uri) as reply:
            reply.raise_for_status()
            image = await reply.content.read(MAX_IMAGE_BYTES + 1)
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise bad_request(
            "ActionParameterValueError", f"Could not fetch ImageURI: {exc}", uri, "ImageURI"
        ) from None
    return await _start_update(bmc, image, body, note)


async def _start_update(
    bmc: Bmc, image: bytes, params: dict[str, Any], note: dict[str, Any]
) -> web.Response:
    if len(image) > MAX_IMAGE_BYTES:
        raise RedfishError(
            413,
            "ActionParameterValueError",
            "The image is too large.",
            ("UpdateFile", "MaxImageSizeBytes"),
        )
    parsed = parse_options(params)
    targets = tuple(target_member(t, bmc.dialect) for t in parsed.targets)
    options = dataclasses.replace(parsed, targets=targets)
    if options.apply_time not in bmc.dialect.apply_times:
        raise bad_request(
            "ActionParameterValueError",
            f"@Redfish.OperationApplyTime {options.apply_time!r} is not supported.",
            "@Redfish.OperationApplyTime",
        )
    if options.stage and not bmc.dialect.activate:
        raise bad_request("ActionParameterNotSupported", "Stage is not supported.", "Stage")
    # The image's SHA-384, as attested bundles name theirs: what tests compare pushes against.
    sha384 = hashlib.sha384(image).hexdigest()
    note.update(
        targets=list(options.targets),
        stage=options.stage,
        force=options.force,
        bytes=len(image),
        sha384=sha384,
    )
    plan = plan_update(bmc.node, image, options)
    note["plan"] = plan
    task = bmc.start_update(plan, options)
    if not bmc.dialect.taskless:
        return task_accepted(bmc, task)
    # Synchronous: answered once the job ended, with no Task left to read (dialects.Dialect).
    if task.runner is not None:
        await asyncio.shield(task.runner)
    del bmc.tasks[task.id]
    note["task_state"] = task.state
    if task.state != "Completed":
        raise RedfishError(500, "ApplyFailed", "The update failed.", ("UpdateFile", bmc.node.id))
    return web.Response(status=204, headers={"OData-Version": "4.0"})


def _staged(bmc: Bmc, members: list[str]) -> list[str]:
    missing = [m for m in members if not bmc.node.components[m].staged]
    if missing:
        raise bad_request(
            "ActionParameterValueError",
            f"No staged image to activate on {', '.join(missing)}.",
            ",".join(missing),
            "Targets",
        )
    return members


async def service_activate(
    request: web.Request, bmc: Bmc, _: re.Match[str], note: dict[str, Any]
) -> web.Response:
    """``UpdateService.Activate`` (UpdateService v1_16_0): ``Targets`` is required."""
    if not bmc.dialect.activate:
        raise not_found(request.path)
    targets = (await read_json(request)).get("Targets")
    if not isinstance(targets, list) or not targets:
        raise bad_request("ActionParameterMissing", "Targets is required.", "Activate", "Targets")
    uris = tuple(t.get("@odata.id", "") if isinstance(t, dict) else "" for t in targets)
    members = _staged(bmc, target_members(bmc.node, uris))
    note["targets"] = members
    return task_accepted(bmc, bmc.start_activate(members))


async def member_activate(
    request: web.Request, bmc: Bmc, m: re.Match[str], note: dict[str, Any]
) -> web.Response:
    """``SoftwareInventory.Activate`` (SoftwareInventory v1_12_0)."""
    if not bmc.dialect.activate:
        raise not_found(request.path)
    await read_json(request)
    if m["id"] not in bmc.node.components:
        raise not_found(m.string)
    note["targets"] = _staged(bmc, [m["id"]])
    return task_accepted(bmc, bmc.start_activate([m["id"]]))


async def commit_image(
    request: web.Request, bmc: Bmc, _: re.Match[str], note: dict[str, Any]
) -> web.Response:
    """``#NvidiaUpdateService.CommitImage`` (the GB200 capture's OEM action, ActionInfo
    parameter ``Targets``): copy each target's running image to its other bank, synchronously
    (204); every member with a second bank when ``Targets`` is absent."""
    if not bmc.dialect.commit_image:
        raise not_found(request.path)
    targets = (await read_json(request)).get("Targets")
    if targets is not None and (
        not isinstance(targets, list) or not all(isinstance(t, str) for t in targets)
    ):
        raise bad_request(
            "ActionParameterValueError", "Targets must be an array of URIs.", "Targets"
        )
    members = target_members(bmc.node, tuple(targets or ()))
    banked = [m for m in members if bmc.node.components[m].banks]
    if targets and len(banked) != len(members):
        plain = sorted(set(members) - set(banked))
        raise bad_request(
            "ActionParameterValueError", f"{', '.join(plain)} keep no second bank.", "Targets"
        )
    for member in banked:
        component = bmc.node.components[member]
        component.inactive_version = component.version
        component.staged = False
    note["targets"] = banked
    return web.Response(status=204)


async def reset(
    request: web.Request, bmc: Bmc, m: re.Match[str], note: dict[str, Any]
) -> web.Response:
    manager = "/Managers/" in m.string
    if manager and m["id"] != bmc.dialect.manager_id:
        raise not_found(m.string)
    reset_type = (await read_json(request)).get("ResetType", "GracefulRestart")
    allowed = bmc.dialect.manager_reset_types if manager else systems.RESET_TYPES
    if reset_type not in allowed:
        raise bad_request(
            "ActionParameterValueError",
            f"Unsupported ResetType {reset_type!r}.",
            str(reset_type),
            "ResetType",
        )
    note["reset_type"] = reset_type
    note["activated"] = bmc.reset("manager" if manager else "system")
    if manager:  # the BMC itself reboots: answer, then go dark
        bmc.go_offline(BMC_REBOOT_MINUTES * bmc.time_scale)
        return web.Response(status=204, headers={"OData-Version": "4.0"})
    bmc.power = "Off" if reset_type in {"ForceOff", "GracefulShutdown"} else "On"
    if bmc.dialect.reset_task:
        task = bmc.new_task("Computer Reset")
        task.messages.append(
            {
                "@odata.type": "#Message.v1_1_2.Message",
                "MessageId": "TaskEvent.1.0.TaskCompletedOK",
                "Message": f"The task with id {task.id} has completed.",
                "MessageArgs": [task.id],
                "MessageSeverity": "OK",
                "Resolution": "None.",
            }
        )
        task.finish("Completed")
        note["task"] = task.id
        return task_accepted(bmc, task)
    return web.Response(status=204, headers={"OData-Version": "4.0"})


async def chassis_reset(
    request: web.Request, bmc: Bmc, m: re.Match[str], note: dict[str, Any]
) -> web.Response:
    """``Chassis.Reset`` of a dialect's chassis (Chassis v1_25_0): on GB200 NVL the tray's
    power cycle, after which the images the updates wrote run (nvfwupd's RF_PWR_CYCLE)."""
    if m["id"] not in bmc.dialect.extra_chassis:
        raise not_found(m.string)
    reset_type = (await read_json(request)).get("ResetType")
    if reset_type not in bmc.dialect.chassis_reset_types:
        raise bad_request(
            "ActionParameterValueError",
            f"Unsupported ResetType {reset_type!r}.",
            str(reset_type),
            "ResetType",
        )
    note.update(reset_type=reset_type, chassis=m["id"])
    # The tray power cycles: the images waiting for it run once it is back, as long after the
    # answer as activating them one by one takes (the seed durations), not at once.
    waiting = [c for c in bmc.pending_reset if bmc.node.components[c].staged]
    note["activated"] = waiting
    minutes = sum(bmc.node.components[c].cls.activate_minutes for c in waiting)
    asyncio.get_running_loop().call_later(minutes * bmc.time_scale, bmc.reset, "chassis")
    bmc.power = "On"
    return web.Response(status=204, headers={"OData-Version": "4.0"})


async def delete_task(
    _r: web.Request, bmc: Bmc, m: re.Match[str], note: dict[str, Any]
) -> web.Response:
    task = bmc.tasks.get(m["id"])
    if task is None:
        raise not_found(m.string)
    note["task"] = task.id
    if task.runner is not None and not task.done:
        task.runner.cancel()
        task.finish("Cancelled")
    return json_response(tasks.task_doc(task))


# path regex -> {method: handler}; the server adds GET from resources.GETTERS.
MUTATIONS: list[tuple[re.Pattern[str], dict[str, Handler]]] = [
    (re.compile(sessions.SESSIONS), {"POST": create_session}),
    (re.compile(f"{sessions.SESSIONS}/(?P<id>[^/]+)"), {"DELETE": delete_session}),
    (re.compile(f"{PUSH_URI}|{UPDATE}/upload"), {"POST": multipart_push}),
    (re.compile(HTTP_PUSH_URI), {"POST": http_push}),
    (re.compile(accounts.ACCOUNTS), {"POST": create_account}),
    (re.compile(f"{accounts.ACCOUNTS}/(?P<id>[^/]+)"), {"DELETE": delete_account}),
    (re.compile(f"{UPDATE}/Actions/UpdateService.SimpleUpdate"), {"POST": simple_update}),
    (re.compile(f"{UPDATE}/Actions/UpdateService.Activate"), {"POST": service_activate}),
    (
        re.compile(f"{inventory.FIRMWARE}/(?P<id>[^/]+)/Actions/SoftwareInventory.Activate"),
        {"POST": member_activate},
    ),
    (re.compile(COMMIT_IMAGE), {"POST": commit_image}),
    (re.compile(f"{systems.SYSTEM}/Actions/ComputerSystem.Reset"), {"POST": reset}),
    (re.compile(f"{ROOT}/Managers/(?P<id>[^/]+)/Actions/Manager.Reset"), {"POST": reset}),
    (
        re.compile(f"{systems.CHASSIS_ROOT}/(?P<id>[^/]+)/Actions/Chassis.Reset"),
        {"POST": chassis_reset},
    ),
    (re.compile(f"{tasks.TASKS}/(?P<id>[^/]+)"), {"DELETE": delete_task}),
    (re.compile(f"{tasks.MONITORS}/(?P<id>[^/]+)"), {"DELETE": delete_task}),
]
