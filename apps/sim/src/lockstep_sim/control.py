"""Fault injection at the HTTP layer and the ``/faults`` control endpoint (first address only).

``GET /faults`` returns the plan, ``PUT /faults`` replaces it (JSON body; 400 naming the bad
field), ``DELETE /faults`` clears it. Like ``/ledger`` and ``/fleet.json`` it is not Redfish and
needs no credentials, and request faults never apply to it.

``/scenario`` does the same for drift scenarios (``scenarios``/``drifts``): ``GET`` lists the
active drifts, ``POST`` applies ``{"drifts": [...]}`` or ``{"mix": "default", "seed": 7}`` all
or nothing (400/409 naming the bad field), ``DELETE`` undoes all, ``DELETE ?node=<id>`` one.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

from aiohttp import web

from lockstep_sim.drifts import DriftControl, Undone
from lockstep_sim.errors import RedfishError
from lockstep_sim.faults import REQUEST_KINDS, FaultPlan, FaultPlanError, parse_plan
from lockstep_sim.injection import FaultControl, reset_connection
from lockstep_sim.scenarios import ScenarioError, parse_request

if TYPE_CHECKING:
    from lockstep_sim.bmc import Bmc

_5XX_MESSAGES = {500: "GeneralError", 502: "GeneralError", 503: "ServiceTemporarilyUnavailable"}


async def faults_endpoint(request: web.Request, faults: FaultControl) -> web.Response:
    if request.method == "GET":
        return web.json_response(faults.plan.to_dict())
    if request.method == "DELETE":
        faults.replace(FaultPlan())
        return web.json_response(faults.plan.to_dict())
    if request.method != "PUT":
        raise web.HTTPMethodNotAllowed(request.method, ["GET", "PUT", "DELETE"])
    try:
        plan = parse_plan(await request.json())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return web.json_response({"error": "body: not valid JSON", "field": "body"}, status=400)
    except FaultPlanError as exc:
        return web.json_response({"error": str(exc), "field": exc.field}, status=400)
    faults.replace(plan)
    return web.json_response(plan.to_dict())


def _refused(exc: ScenarioError) -> web.Response:
    return web.json_response({"error": str(exc), "field": exc.field}, status=exc.status)


def _undone(undone: list[Undone]) -> list[dict[str, Any]]:
    return [{**u.drift.to_dict(), "restored": u.restored} for u in undone]


async def scenario_endpoint(request: web.Request, drifts: DriftControl) -> web.Response:
    if request.method == "GET":
        return web.json_response({"active": [d.to_dict() for d in drifts.plan()]})
    if request.method == "DELETE":
        return _scenario_delete(request, drifts)
    if request.method != "POST":
        raise web.HTTPMethodNotAllowed(request.method, ["GET", "POST", "DELETE"])
    try:
        applied = drifts.apply(parse_request(await request.json(), drifts.fleet))
    except (json.JSONDecodeError, UnicodeDecodeError):
        return web.json_response({"error": "body: not valid JSON", "field": "body"}, status=400)
    except ScenarioError as exc:
        return _refused(exc)
    return web.json_response({"applied": [d.to_dict() for d in applied]})


def _scenario_delete(request: web.Request, drifts: DriftControl) -> web.Response:
    node = request.query.get("node")
    if node is None:
        undone, refused = drifts.clear()
        body = {"undone": _undone(undone), "refused": [str(e) for e in refused]}
        return web.json_response(body, status=409 if refused else 200)
    try:
        return web.json_response({"undone": _undone([drifts.undo(node)])})
    except ScenarioError as exc:
        return _refused(exc)


async def request_faults(request: web.Request, bmc: Bmc) -> bool:
    """Apply request faults; False when the connection was reset and nothing may be sent.

    Raises ``RedfishError`` for an injected 5xx (reliability.md 7.D1: 500/503 with Retry-After).
    """
    if bmc.offline:  # rebooting: the BMC's web server is down (connection reset, no answer)
        reset_connection(request)
        return False
    fault = bmc.faults.state.fire(REQUEST_KINDS, bmc.node.id)
    if fault is None:
        return True
    bmc.record("fault", kind="fault", fault=fault.kind, method=request.method, path=request.path)
    if fault.kind == "latency":
        await asyncio.sleep(fault.latency_ms / 1000)
        return True
    if fault.kind == "http_5xx":
        raise RedfishError(
            fault.status,
            _5XX_MESSAGES[fault.status],
            f"The service is temporarily unavailable (injected {fault.status}).",
            (str(fault.retry_after),) if fault.status == 503 else (),
            headers={"Retry-After": str(fault.retry_after)},
        )
    # hang: no answer until the fault is cleared (bounded by max_seconds)
    if fault.kind == "hang" and await bmc.faults.wait_cleared(fault, fault.max_seconds):
        return True
    reset_connection(request)  # connection_reset, or a hang that timed out
    return False
