"""The scheduler emulation's HTTP API through aiohttp's test client."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from lockstep_sim.scheduler.http import make_app
from lockstep_sim.scheduler.model import Scheduler
from tests.support import FakeClock

pytestmark = pytest.mark.integration


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def scheduler(clock: FakeClock) -> Scheduler:
    return Scheduler({"gpu-a": ["a1", "a2"], "gpu-b": ["b1"]}, clock=clock, time_scale=60.0)


@pytest.fixture
async def client(scheduler: Scheduler) -> AsyncIterator[TestClient[Any, Any]]:
    async with TestClient(TestServer(make_app(scheduler))) as c:
        yield c


async def ok(client: TestClient[Any, Any], method: str, path: str, **kw: Any) -> Any:
    resp = await client.request(method, path, **kw)
    assert resp.status < 300, await resp.text()
    return await resp.json()


async def err(client: TestClient[Any, Any], method: str, path: str, status: int, **kw: Any) -> str:
    resp = await client.request(method, path, **kw)
    assert resp.status == status, await resp.text()
    body = await resp.json()
    assert isinstance(body["error"], str)
    return str(body["error"])


async def test_nodes_and_pools(client: TestClient[Any, Any]) -> None:
    nodes = (await ok(client, "GET", "/scheduler/nodes"))["nodes"]
    assert [(n["id"], n["state"]) for n in nodes] == [
        ("a1", "idle"),
        ("a2", "idle"),
        ("b1", "idle"),
    ]
    filtered = await ok(client, "GET", "/scheduler/nodes", params={"pool": "gpu-b"})
    assert [n["id"] for n in filtered["nodes"]] == ["b1"]
    pools = (await ok(client, "GET", "/scheduler/pools"))["pools"]
    assert pools[0] == {"name": "gpu-a", "nodes": ["a1", "a2"], "states": {"idle": 2}}
    assert (await ok(client, "GET", "/scheduler/nodes/a2"))["pool"] == "gpu-a"


async def test_drain_with_job_then_drained_when_job_ends(
    client: TestClient[Any, Any], clock: FakeClock
) -> None:
    job = await ok(client, "POST", "/scheduler/jobs", json={"pool": "gpu-b", "duration_s": 120})
    assert job["nodes"] == ["b1"]
    node = await ok(
        client, "POST", "/scheduler/nodes/b1/drain", json={"reason": "fw", "by": "lockstep"}
    )
    assert node["state"] == "draining"
    assert node["drain"]["by"] == "lockstep"
    clock.t = 2.0  # 120 simulated seconds
    assert (await ok(client, "GET", "/scheduler/nodes/b1"))["state"] == "drained"
    entries = (await ok(client, "GET", "/scheduler/ledger", params={"node": "b1"}))["entries"]
    assert [(e["action"], e["to"]) for e in entries] == [
        ("job_start", "allocated"),
        ("drain", "draining"),
        ("job_end", "drained"),
    ]
    resumed = await ok(client, "POST", "/scheduler/nodes/b1/resume", json={"by": "lockstep"})
    assert resumed["state"] == "idle"


async def test_resume_of_foreign_drain_is_refused_unless_forced(
    client: TestClient[Any, Any], scheduler: Scheduler
) -> None:
    scheduler.inject_foreign_drain("a1", reason="PSU swap", by="dc-ops")
    message = await err(client, "POST", "/scheduler/nodes/a1/resume", 409, json={"by": "lockstep"})
    assert "dc-ops" in message and "PSU swap" in message
    assert (await ok(client, "GET", "/scheduler/nodes/a1"))["state"] == "drained"
    forced = await ok(
        client, "POST", "/scheduler/nodes/a1/resume", json={"by": "lockstep", "force": True}
    )
    assert forced["state"] == "idle"
    ledger = (await ok(client, "GET", "/scheduler/ledger"))["entries"]
    assert ledger[-1]["detail"] == "forced over drain by 'dc-ops'"


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "needle"),
    [
        ("GET", "/scheduler/nodes/zz", None, 404, "'zz'"),
        ("POST", "/scheduler/nodes/zz/drain", {"reason": "r", "by": "b"}, 404, "'zz'"),
        ("POST", "/scheduler/nodes/a1/drain", {"reason": "r"}, 400, "'by'"),
        ("POST", "/scheduler/nodes/a1/drain", {"reason": "", "by": "b"}, 400, "'reason'"),
        ("POST", "/scheduler/nodes/a1/drain", [1, 2], 400, "JSON object"),
        ("POST", "/scheduler/nodes/a1/resume", {"by": "b"}, 409, "not drained"),
        ("POST", "/scheduler/nodes/a1/resume", {"by": "b", "force": "yes"}, 400, "'force'"),
        ("POST", "/scheduler/jobs", {"pool": "nope"}, 404, "'nope'"),
        ("POST", "/scheduler/jobs", {"pool": "gpu-a", "nodes": 0}, 400, "'nodes'"),
        ("POST", "/scheduler/jobs", {"pool": "gpu-a", "nodes": 3}, 409, "not enough"),
        ("GET", "/scheduler/nope", None, 404, "/scheduler/nope"),
    ],
)
async def test_bad_requests_get_json_errors(
    client: TestClient[Any, Any],
    method: str,
    path: str,
    body: Any,
    status: int,
    needle: str,
) -> None:
    assert needle in await err(client, method, path, status, json=body)


async def test_body_that_is_not_json(client: TestClient[Any, Any]) -> None:
    message = await err(client, "POST", "/scheduler/nodes/a1/drain", 400, data=b"{not json")
    assert "not JSON" in message
