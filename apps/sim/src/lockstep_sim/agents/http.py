"""The node agents' in-band command channel: what an updater's node-agent adapter calls.

    GET  /agents/{node}                 software state, phase, health-relevant facts
    POST /agents/{node}/install-driver  {"version": "580.95.05", "kernel": optional}
    POST /agents/{node}/rebuild-dkms
    POST /agents/{node}/reboot
    PUT  /agents/{node}/faults          {"dkms_fails_on_new_kernel", "missing_firmware_dir",
                                         "degrading_versions", "degrade_onset_reports",
                                         "secure_boot_rejects_module"}
    GET  /agents/ledger                 every step taken, in order

Every request must carry one of the simulator's accounts (``Authorization: Basic``, as for its
BMCs; Lockstep uses the Operator one): a node agent that installs drivers is not an open port.
A request without them is answered 401 and changes nothing.

Steps follow the transition table in ``state.py``; a refused step answers 409 naming the phase,
an unknown driver release 400. Every accepted or refused step is recorded in the ledger.
"""

from __future__ import annotations

import functools
import hmac
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from lockstep_sim.agents.software import CATALOG, Faults, NodeSoftware
from lockstep_sim.agents.state import InvalidTransition
from lockstep_sim.sessions import basic_credentials

AGENTS_KEY = web.AppKey("lockstep_sim_agents", dict)
LEDGER_KEY = web.AppKey("lockstep_sim_agents_ledger", list)
ACCOUNT_KEY = web.AppKey("lockstep_sim_agents_account", tuple)


def describe(node: NodeSoftware) -> dict[str, Any]:
    """What an in-band agent reports about its node (JSON-ready)."""
    s = node.state
    return {
        "node_id": node.node_id,
        "phase": node.phase.value,
        "driver": s.driver.version,
        "branch": s.driver.branch,
        "loaded_module": s.loaded_module,
        "gsp_firmware": s.gsp_firmware,
        "gsp_aligned": s.gsp_aligned(),
        "firmware_dirs": list(s.firmware_dirs),
        "kernel": s.kernel,
        "pending_kernel": s.pending_kernel,
        "dkms": s.dkms.value,
        "cuda": s.cuda,
        "nccl": s.nccl,
        "fabric_manager": s.fabric_manager,
        "module_rejected": s.module_rejected,
        "diag_passed": node.diag_passes(),
        "faults": {
            **asdict(node.faults),
            "degrading_versions": sorted(node.faults.degrading_versions),
        },
    }


def _node(request: web.Request) -> NodeSoftware:
    nodes: dict[str, NodeSoftware] = request.app[AGENTS_KEY]
    node = nodes.get(request.match_info["node"])
    if node is None:
        raise _bad(f"no agent for node {request.match_info['node']!r}", 404)
    return node


async def _body(request: web.Request) -> dict[str, Any]:
    if not request.can_read_body:
        return {}
    try:
        body = await request.json()
    except ValueError:
        raise _bad("body is not JSON") from None
    if not isinstance(body, dict):
        raise _bad("body must be a JSON object")
    return body


class Refused(Exception):
    """A request this channel answers with a JSON error (kept out of any app middleware)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def _bad(message: str, status: int = 400) -> Refused:
    return Refused(message, status)


Handler = Callable[[web.Request], Awaitable[web.Response]]


def _answers(handler: Handler) -> Handler:
    @functools.wraps(handler)
    async def wrapped(request: web.Request) -> web.Response:
        try:
            _authenticate(request)
            return await handler(request)
        except Refused as exc:
            return web.json_response({"error": str(exc)}, status=exc.status)

    return wrapped


def _authenticate(request: web.Request) -> None:
    given = basic_credentials(request.headers.get("Authorization", ""))
    ok = False
    for user, password in request.app[ACCOUNT_KEY]:
        # Both compared, in constant time, for every account, whatever matched before.
        if given is not None:
            ok |= hmac.compare_digest(given[0], user) & hmac.compare_digest(given[1], password)
    if not ok:
        raise _bad("the agent channel requires the agent account's credentials", 401)


def _record(
    request: web.Request, node: NodeSoftware, step: str, outcome: str, **detail: Any
) -> None:
    request.app[LEDGER_KEY].append(
        {
            "at": datetime.now(UTC).isoformat(),
            "node": node.node_id,
            "step": step,
            "outcome": outcome,
            **detail,
        }
    )


async def _step(request: web.Request, step: str) -> web.Response:
    node = _node(request)
    body = await _body(request)
    try:
        if step == "install-driver":
            version = body.get("version")
            if not isinstance(version, str) or version not in CATALOG:
                _record(request, node, step, "refused", version=version)
                raise _bad(f"unknown driver release {version!r}; known: {sorted(CATALOG)}")
            kernel = body.get("kernel")
            if kernel is not None and not isinstance(kernel, str):
                raise _bad("kernel must be a string")
            node.install_driver(version, kernel=kernel)
        elif step == "rebuild-dkms":
            node.rebuild_dkms()
        else:
            node.reboot()
    except InvalidTransition as exc:
        _record(request, node, step, "refused", reason=str(exc))
        raise _bad(f"{step} refused in phase {node.phase.value}: {exc}", 409) from None
    _record(request, node, step, node.phase.value)
    return web.json_response(describe(node))


routes = web.RouteTableDef()


@routes.get("/agents/ledger")
@_answers
async def ledger(request: web.Request) -> web.Response:
    """Every in-band step, in order."""
    return web.json_response(request.app[LEDGER_KEY])


@routes.get("/agents/{node}")
@_answers
async def show(request: web.Request) -> web.Response:
    """One node's in-band state."""
    return web.json_response(describe(_node(request)))


@routes.post("/agents/{node}/install-driver")
@_answers
async def install_driver(request: web.Request) -> web.Response:
    """Install a driver release (builds DKMS for the kernel that boots next)."""
    return await _step(request, "install-driver")


@routes.post("/agents/{node}/rebuild-dkms")
@_answers
async def rebuild_dkms(request: web.Request) -> web.Response:
    """Rebuild the kernel module."""
    return await _step(request, "rebuild-dkms")


@routes.post("/agents/{node}/reboot")
@_answers
async def reboot(request: web.Request) -> web.Response:
    """Reboot: load the built module (or expose the seed-004 GSP mismatch)."""
    return await _step(request, "reboot")


@routes.put("/agents/{node}/faults")
@_answers
async def set_faults(request: web.Request) -> web.Response:
    """Replace a node's fault knobs; unknown or mistyped knobs are refused, nothing changes."""
    node = _node(request)
    body = await _body(request)
    known = set(Faults.__dataclass_fields__)
    unknown = sorted(set(body) - known)
    if unknown:
        raise _bad(f"unknown fault knob(s) {unknown}; known: {sorted(known)}")
    faults = _faults(body)
    node.faults = faults
    _record(request, node, "faults", "set", knobs=sorted(body))
    return web.json_response(describe(node))


def _faults(body: dict[str, Any]) -> Faults:
    default = Faults()

    def flag(name: str) -> bool:
        value = body.get(name, getattr(default, name))
        if not isinstance(value, bool):
            raise _bad(f"{name} must be true or false")
        return value

    versions = body.get("degrading_versions", [])
    if not isinstance(versions, list) or not all(isinstance(v, str) for v in versions):
        raise _bad("degrading_versions must be a list of driver versions")
    onset = body.get("degrade_onset_reports", default.degrade_onset_reports)
    if not isinstance(onset, int) or isinstance(onset, bool) or onset < 0:
        raise _bad("degrade_onset_reports must be a non-negative integer")
    return Faults(
        dkms_fails_on_new_kernel=flag("dkms_fails_on_new_kernel"),
        missing_firmware_dir=flag("missing_firmware_dir"),
        degrading_versions=frozenset(versions),
        degrade_onset_reports=onset,
        secure_boot_rejects_module=flag("secure_boot_rejects_module"),
    )


def add_agent_routes(
    app: web.Application,
    nodes: dict[str, NodeSoftware],
    accounts: tuple[tuple[str, str], ...],
    ledger: list[dict[str, Any]] | None = None,
) -> None:
    """Serve the agents' command channel from ``app`` (e.g. the scheduler's), to callers that
    present one of ``accounts`` (username, password); every step goes to ``ledger`` (a new
    list when None)."""
    app[AGENTS_KEY] = nodes
    app[ACCOUNT_KEY] = accounts
    app[LEDGER_KEY] = [] if ledger is None else ledger
    app.add_routes(routes)
