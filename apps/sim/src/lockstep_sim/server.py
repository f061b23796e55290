"""One aiohttp application serving many BMCs: each on its own 127.0.0.0/8 address, all on one
port, or (``--advertise``) each on its own port of every interface; the BMC is chosen by the
connection's local address or port (``sockname``)."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from aiohttp import web

from lockstep_sim import control, tasks
from lockstep_sim.accounts import ACCOUNTS, Account
from lockstep_sim.actions import MUTATIONS, json_response, read_json
from lockstep_sim.bmc import Bmc, etag, with_etag
from lockstep_sim.drifts import DriftControl
from lockstep_sim.errors import RedfishError, not_found
from lockstep_sim.odata import ROOT
from lockstep_sim.patching import apply_patch, writable
from lockstep_sim.resources import expand, find_getter
from lockstep_sim.service_root import metadata_xml
from lockstep_sim.sessions import SESSIONS, basic_credentials

METADATA = f"{ROOT}/$metadata"
ACCOUNT_SERVICE = f"{ROOT}/AccountService"
SESSION_SERVICE = f"{ROOT}/SessionService"
MANAGERS = f"{ROOT}/Managers"
PUBLIC = {"/redfish", ROOT, f"{ROOT}/odata", METADATA}
SUPPORTED_QUERY = {"$expand"}
MONITOR = re.compile(f"{tasks.MONITORS}/(?P<id>[^/]+)")
BMCS: web.AppKey[dict[str, Bmc]] = web.AppKey("bmcs", dict)
PORTS: web.AppKey[dict[int, Bmc]] = web.AppKey("ports", dict)
"""Each BMC by its own port (``--advertise``); empty where they share one (by address)."""
FLEET: web.AppKey[list[dict[str, Any]]] = web.AppKey("fleet", list)
LATENCY: web.AppKey[float] = web.AppKey("latency", float)
DRIFTS: web.AppKey[DriftControl] = web.AppKey("drifts", DriftControl)


def _allowed(path: str) -> list[str]:
    methods: list[str] = []
    if find_getter(path) is not None or MONITOR.fullmatch(path) or path == METADATA:
        methods += ["GET", "HEAD"]
        if writable(path) is not None:
            methods.append("PATCH")
    for pattern, handlers in MUTATIONS:
        if pattern.fullmatch(path):
            methods += list(handlers)
    return methods


def _authenticate(request: web.Request, bmc: Bmc) -> Account | None:
    """The account behind ``X-Auth-Token`` or ``Authorization: Basic`` (DSP0266 "Security")."""
    token = request.headers.get("X-Auth-Token")
    if token is not None:
        session = bmc.sessions.by_token.get(token)
        return bmc.accounts.by_name(session.username) if session else None
    creds = basic_credentials(request.headers.get("Authorization", ""))
    return bmc.accounts.check(*creds) if creds else None


def _privilege(method: str, path: str, account: Account, bmc: Bmc) -> str:
    """The privilege an operation needs, as the Redfish privilege registry (DSP8011) gives it:
    reads ``Login``; accounts and roles ``ConfigureUsers`` (one's own account
    ``ConfigureSelf``); another's session, the SessionService and a Manager (its PATCH and
    actions, ``Manager.Reset``) ``ConfigureManager``; one's own session ``ConfigureSelf``; the
    rest (UpdateService and its actions, systems, chassis, Bios) ``ConfigureComponents``."""
    if method in {"GET", "HEAD"}:
        return "Login"
    if path.startswith(ACCOUNTS):
        own = path == f"{ACCOUNTS}/{account.id}" and method == "PATCH"
        return "ConfigureSelf" if own else "ConfigureUsers"
    if path.startswith(ACCOUNT_SERVICE):
        return "ConfigureUsers"
    if path.startswith(SESSIONS):
        session = bmc.sessions.get(path.rsplit("/", 1)[1])
        own = session is not None and session.username == account.username
        return "ConfigureSelf" if own else "ConfigureManager"
    if path.startswith((SESSION_SERVICE, MANAGERS)):
        return "ConfigureManager"
    return "ConfigureComponents"


def _error(exc: RedfishError) -> web.Response:
    headers = dict(exc.headers)
    if exc.status == 401:
        headers["WWW-Authenticate"] = 'Basic realm="Redfish"'
    return json_response(exc.body(), exc.status, **headers)


async def dispatch(request: web.Request) -> web.StreamResponse:
    sockname = request.transport.get_extra_info("sockname") if request.transport else None
    bmc = (
        (request.app[PORTS].get(sockname[1]) or request.app[BMCS].get(sockname[0]))
        if sockname
        else None
    )
    if bmc is None:
        raise web.HTTPNotFound
    if request.app[LATENCY] > 0:
        await asyncio.sleep(request.app[LATENCY])
    path = request.path.rstrip("/") or "/"
    if bmc.node.index == 0 and path in CONTROL_PATHS:
        return await _control(request, bmc, path)
    try:
        if not await control.request_faults(request, bmc):
            return web.Response(status=500)  # never sent: the connection was reset
        return await _handle(request, bmc, path)
    except RedfishError as exc:
        return _error(exc)


CONTROL_PATHS = frozenset({"/fleet.json", "/ledger", "/faults", "/scenario"})


async def _control(request: web.Request, bmc: Bmc, path: str) -> web.Response:
    """The simulator's own endpoints (first address only; not Redfish, no request faults)."""
    if path == "/fleet.json":
        return web.json_response(request.app[FLEET])
    if path == "/ledger":
        return web.json_response(_ledger(request))
    if path == "/faults":
        return await control.faults_endpoint(request, bmc.faults)
    return await control.scenario_endpoint(request, request.app[DRIFTS])


def _ledger(request: web.Request) -> list[dict[str, Any]]:
    wanted = request.query.get("node")
    entries = [
        e for b in request.app[BMCS].values() if wanted in {None, b.node.id} for e in b.ledger
    ]
    return sorted(entries, key=lambda e: (e["node"], e["seq"]))


async def _handle(request: web.Request, bmc: Bmc, path: str) -> web.StreamResponse:
    method = request.method
    if method == "POST" and path.endswith("/Members"):
        path = path.removesuffix("/Members")  # DSP0266 "POST (create)": Members is the collection
    allowed = _allowed(path)
    if not allowed:
        raise not_found(path)
    if method not in allowed:
        raise RedfishError(
            405,
            "OperationNotAllowed",
            f"{method} is not allowed on {path}.",
            headers={"Allow": ", ".join(allowed)},
        )
    login = method == "POST" and path == SESSIONS
    public = path in PUBLIC and method in {"GET", "HEAD"}
    account = None if public or login else _authenticate(request, bmc)
    if not (public or login):
        if account is None:
            raise RedfishError(
                401, "NoValidSession", "There is no valid session established with the service."
            )
        needed = _privilege(method, path, account, bmc)
        if not account.can(needed):
            raise RedfishError(403, "InsufficientPrivilege", f"{needed} privilege is required.")
    _check_request(request)
    if method in {"GET", "HEAD"}:
        response = _get(request, bmc, path)
        response.headers["Allow"] = ", ".join(allowed)  # DSP0266 "Allow" on GET and HEAD
        return response
    note: dict[str, Any] = {"method": method, "path": path}
    try:
        if method == "PATCH":
            doc = apply_patch(
                bmc, path, await read_json(request), request.headers.get("If-Match"), note
            )
            response = json_response(with_etag(doc), ETag=etag(doc))
        else:
            match, handlers = next((m, h) for p, h in MUTATIONS if (m := p.fullmatch(path)))
            response = await handlers[method](request, bmc, match, note)
    except RedfishError as exc:
        bmc.record(_action(method, path), status=exc.status, **note)
        raise
    bmc.record(_action(method, path), status=response.status, **note)
    return response


def _check_request(request: web.Request) -> None:
    """DSP0266 "Request headers" (OData-Version 4.0 only) and "Query parameters" (501 for
    unsupported ``$`` parameters)."""
    if request.headers.get("OData-Version", "4.0") != "4.0":
        raise RedfishError(412, "PreconditionFailed", "Only OData-Version 4.0 is supported.")
    unsupported = [q for q in request.query if q.startswith("$") and q not in SUPPORTED_QUERY]
    if unsupported:
        raise RedfishError(
            501,
            "QueryNotSupported",
            f"Query parameter {unsupported[0]} is not supported.",
            (unsupported[0],),
        )


def _described_by(doc: dict[str, Any]) -> dict[str, str]:
    """The Link rel=describedby header naming the JSON schema of ``@odata.type``."""
    odata_type = str(doc.get("@odata.type", "")).lstrip("#")
    if not odata_type:
        return {}
    schema = odata_type.rsplit(".", 1)[0]
    return {"Link": f"<http://redfish.dmtf.org/schemas/v1/{schema}.json>; rel=describedby"}


def _action(method: str, path: str) -> str:
    if path.startswith(SESSIONS):
        return "session_create" if method == "POST" else "session_delete"
    if method == "PATCH":
        return "patch"
    return path.rsplit("/", 1)[1] if method == "POST" else f"{method.lower()}"


def _get(request: web.Request, bmc: Bmc, path: str) -> web.StreamResponse:
    if path == METADATA:
        return web.Response(
            text=metadata_xml(), content_type="application/xml", headers={"OData-Version": "4.0"}
        )
    monitor = MONITOR.fullmatch(path)
    if monitor is not None:
        task = bmc.tasks.get(monitor["id"])
        if task is None:
            raise not_found(path)
        doc = tasks.task_doc(task)
        if task.done:
            return json_response(doc)
        return json_response(doc, 202, Location=path, **{"Retry-After": bmc.retry_after})
    found = find_getter(path)
    assert found is not None  # noqa: S101 - _allowed checked it
    getter, m = found
    doc = getter(bmc, m)
    tag = etag(doc)
    if request.headers.get("If-None-Match") == tag:
        return web.Response(status=304, headers={"ETag": tag})
    if "$expand" in request.query:
        doc = expand(bmc, doc, request.query["$expand"])
    elif "Members" not in doc and "@odata.id" in doc:
        doc = with_etag(doc)
    response = json_response(doc, ETag=tag)
    response.headers.update(_described_by(doc))
    return response


def build_app(
    bmcs: dict[str, Bmc],
    fleet: list[dict[str, Any]],
    latency_ms: float,
    drifts: DriftControl,
    ports: dict[int, Bmc] | None = None,
) -> web.Application:
    app = web.Application(client_max_size=128 * 1024 * 1024)
    app[DRIFTS] = drifts
    app[BMCS] = bmcs
    app[PORTS] = ports or {}
    app[FLEET] = fleet
    app[LATENCY] = latency_ms / 1000
    app.router.add_route("*", "/{tail:.*}", dispatch)
    return app
