"""aiohttp sub-application exposing the scheduler emulation to adapters and tests.

Every error is JSON ``{"error": "<what is wrong>"}`` with a 4xx status. Time-based changes (jobs
ending, arrivals) are applied lazily: each request first ticks the model.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web

from lockstep_sim.scheduler.errors import SchedulerError
from lockstep_sim.scheduler.model import Job, LedgerEntry, Node, Scheduler

SCHEDULER_KEY = web.AppKey("scheduler", Scheduler)


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def node_json(node: Node) -> dict[str, Any]:
    """JSON view of a node."""
    return {
        "id": node.node_id,
        "pool": node.pool,
        "state": node.state.value,
        "gpus": node.gpus,
        "used_gpus": node.used_gpus,
        "jobs": sorted(node.jobs),
        "drain": None
        if node.drain is None
        else {"reason": node.drain.reason, "by": node.drain.by, "at": node.drain.at},
        "down_reason": node.down_reason,
    }


def _job_json(job: Job) -> dict[str, Any]:
    return {
        "id": job.job_id,
        "pool": job.pool,
        "nodes": list(job.node_ids),
        "gpus_per_node": job.gpus_per_node,
        "started_at": job.started_at,
        "ends_at": job.ends_at,
    }


def _entry_json(entry: LedgerEntry) -> dict[str, Any]:
    return {
        "seq": entry.seq,
        "at": entry.at,
        "node": entry.node_id,
        "action": entry.action,
        "by": entry.by,
        "from": entry.from_state.value,
        "to": entry.to_state.value,
        "detail": entry.detail,
    }


async def _body(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise SchedulerError("request body is not JSON") from None
    if not isinstance(body, dict):
        raise SchedulerError("request body must be a JSON object")
    return body


def _text(body: dict[str, Any], key: str, *, required: bool = True) -> str:
    value = body.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or not value.strip():
        raise SchedulerError(f"field {key!r} is required and must be a non-empty string")
    return value


def _scheduler(request: web.Request) -> Scheduler:
    sched = request.app[SCHEDULER_KEY]
    sched.tick()
    return sched


@web.middleware
async def _errors(request: web.Request, handler: Any) -> web.StreamResponse:
    try:
        response: web.StreamResponse = await handler(request)
    except SchedulerError as exc:
        return _error(exc.status, str(exc))
    except web.HTTPException as exc:
        if exc.status >= 400:
            return _error(exc.status, f"{request.method} {request.path}: {exc.reason}")
        raise
    return response


routes = web.RouteTableDef()


@routes.get("/scheduler/nodes")
async def list_nodes(request: web.Request) -> web.Response:
    """All nodes; ``?pool=`` and ``?state=`` filter."""
    sched = _scheduler(request)
    pool, state = request.query.get("pool"), request.query.get("state")
    nodes = [
        node_json(n)
        for n in sched.nodes.values()
        if (pool is None or n.pool == pool) and (state is None or n.state.value == state)
    ]
    return web.json_response({"nodes": nodes})


@routes.get("/scheduler/nodes/{id}")
async def get_node(request: web.Request) -> web.Response:
    """One node."""
    return web.json_response(node_json(_scheduler(request).node(request.match_info["id"])))


@routes.post("/scheduler/nodes/{id}/drain")
async def drain_node(request: web.Request) -> web.Response:
    """Drain a node: body ``{"reason", "by"}``; a slowed drain takes effect only after its
    delay, whether or not the caller is still there to read the answer."""
    sched = request.app[SCHEDULER_KEY]
    body = await _body(request)
    node_id = request.match_info["id"]
    reason, by = _text(body, "reason"), _text(body, "by")

    delay = sched.next_drain_delay()

    async def drain() -> None:
        if not delay:
            sched.tick()
            sched.drain(node_id, reason, by)
            return
        # A slowed drain is counted, so a test can wait until it landed instead of sleeping.
        sched.slowed_drains_waiting += 1
        try:
            await asyncio.sleep(delay)
            sched.tick()
            sched.drain(node_id, reason, by)
        finally:
            sched.slowed_drains_waiting -= 1
            sched.slowed_drains_done += 1

    await asyncio.shield(asyncio.ensure_future(drain()))  # a caller gone does not stop it
    return web.json_response(node_json(sched.node(node_id)))


@routes.post("/scheduler/nodes/{id}/resume")
async def resume_node(request: web.Request) -> web.Response:
    """Resume a node: body ``{"by", "force"}`` (force defaults to false)."""
    sched = _scheduler(request)
    body = await _body(request)
    force = body.get("force", False)
    if not isinstance(force, bool):
        raise SchedulerError("field 'force' must be true or false")
    node_id = request.match_info["id"]
    sched.resume(node_id, _text(body, "by"), force=force)
    return web.json_response(node_json(sched.node(node_id)))


@routes.get("/scheduler/pools")
async def list_pools(request: web.Request) -> web.Response:
    """Pools with their nodes and a count per state."""
    sched = _scheduler(request)
    pools = []
    for name, ids in sorted(sched.pools.items()):
        counts: dict[str, int] = {}
        for node_id in ids:
            state = sched.nodes[node_id].state.value
            counts[state] = counts.get(state, 0) + 1
        pools.append({"name": name, "nodes": list(ids), "states": counts})
    return web.json_response({"pools": pools})


@routes.get("/scheduler/jobs")
async def list_jobs(request: web.Request) -> web.Response:
    """Running jobs."""
    sched = _scheduler(request)
    return web.json_response({"jobs": [_job_json(j) for j in sched.jobs.values()]})


@routes.post("/scheduler/jobs")
async def submit_job(request: web.Request) -> web.Response:
    """Submit a job: body ``{"pool", "nodes"?, "gpus_per_node"?, "duration_s"?}``."""
    sched = _scheduler(request)
    body = await _body(request)
    numbers: dict[str, float] = {}
    for key, default in (("nodes", 1), ("gpus_per_node", 8), ("duration_s", 300.0)):
        value = body.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise SchedulerError(f"field {key!r} must be a positive number")
        numbers[key] = value
    job = sched.submit_job(
        _text(body, "pool"),
        nodes=int(numbers["nodes"]),
        gpus_per_node=int(numbers["gpus_per_node"]),
        duration_s=float(numbers["duration_s"]),
    )
    if job is None:
        return _error(409, "not enough schedulable nodes with free GPUs in the pool")
    return web.json_response(_job_json(job), status=201)


@routes.get("/scheduler/ledger")
async def ledger(request: web.Request) -> web.Response:
    """Every recorded state change; ``?node=`` filters."""
    sched = _scheduler(request)
    node = request.query.get("node")
    entries = [_entry_json(e) for e in sched.ledger if node is None or e.node_id == node]
    return web.json_response({"entries": entries})


def scheduler_routes() -> web.RouteTableDef:
    """The routes, for mounting in another application (which must set ``SCHEDULER_KEY``)."""
    return routes


def make_app(scheduler: Scheduler) -> web.Application:
    """A standalone application (or sub-application via ``add_subapp``) serving ``scheduler``."""
    app = web.Application(middlewares=[_errors])
    app[SCHEDULER_KEY] = scheduler
    app.add_routes(routes)
    return app
