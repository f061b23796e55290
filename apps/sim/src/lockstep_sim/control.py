"""Fault injection at the HTTP layer and the ``/faults`` control endpoint (first address only).

``GET /faults`` returns the plan, ``PUT /faults`` replaces it (JSON body; 400 naming the bad
field), ``DELETE /faults`` clears it. Like ``/ledger`` and ``/fleet.json`` it is not Redfish and
needs no credentials, and request faults never apply to it.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING

from aiohttp import web

from lockstep_sim.errors import RedfishError
from lockstep_sim.faults import REQUEST_KINDS, FaultPlan, FaultPlanError, parse_plan
from lockstep_sim.injection import FaultControl, reset_connection

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
