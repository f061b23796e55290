"""Issue 15: BMC passwords were sent in clear to an ``http://`` BMC without a word. Now an
http BMC is sent nothing unless its entry allows plain http, and a sweep names those that do in
one warning."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from aiohttp import web

from lockstep_inventory.adapters.sweeper import SweepOptions, SweepResult, sweep
from lockstep_redfish.session import BmcTarget
from lockstep_sim.options import SimOptions
from lockstep_sim.simulator import Simulator

from .conftest import StaticCredentials, session_balance

pytestmark = pytest.mark.integration
FAST = SweepOptions(retries=0, timeout_s=2)


@dataclass
class Listener:
    """A TCP port that counts connections and keeps every byte sent to it."""

    url: str = ""
    connections: int = 0
    received: bytearray = field(default_factory=bytearray)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.received += await reader.read(65536)
        writer.close()


@pytest.fixture
async def listener() -> AsyncIterator[Listener]:
    found = Listener()
    server = await asyncio.start_server(found.handle, "127.0.0.1", 0)
    found.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    async with server:
        yield found


async def sweep_of(*targets: BmcTarget) -> list[SweepResult]:
    return [r async for r in sweep(targets, credentials=StaticCredentials(), options=FAST)]


async def test_an_http_bmc_not_allowed_plain_http_is_sent_nothing(listener: Listener) -> None:
    [result] = await sweep_of(BmcTarget("n1", listener.url))

    assert not result.readable
    assert result.error == (
        f"refusing to send credentials over plain http to {listener.url}: use https, or "
        "allow plain http for this BMC explicitly (allow_plain_http)"
    )
    assert (listener.connections, bytes(listener.received)) == (0, b"")


async def test_a_redirect_never_carries_the_login_elsewhere(listener: Listener) -> None:
    # An allowed BMC (or anything answering in its place) redirecting the login: the password
    # would be posted again to the Location, in clear. Redirects are not followed.
    async def redirect(request: web.Request) -> web.Response:
        return web.Response(status=307, headers={"Location": listener.url + request.path})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", redirect)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        port = runner.addresses[0][1]
        url = f"http://127.0.0.1:{port}"
        [result] = await sweep_of(BmcTarget("n1", url, allow_plain_http=True))
    finally:
        await runner.cleanup()

    assert not result.readable
    assert (
        result.error
        == f"POST {url}/redfish/v1/SessionService/Sessions: no session created (HTTP 307)"
    )
    assert (listener.connections, bytes(listener.received)) == (0, b"")


async def test_allowed_bmcs_are_swept_and_named_in_one_warning_per_sweep(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    options = SimOptions(3, "gb200", host_base="127.70.4.1", port=0)
    async with Simulator(options) as sim:
        allowed = {"node-00000", "node-00002"}
        targets = [
            BmcTarget(n.id, sim.bmc_url(n.id), allow_plain_http=n.id in allowed) for n in sim.fleet
        ]
        results = {r.node_id: r for r in await sweep_of(*targets)}

        assert [results[n].readable for n in sorted(results)] == [True, False, True]
        refused = results["node-00001"]
        assert refused.error is not None
        assert refused.error.startswith("refusing to send credentials over plain http")
        assert not [e for e in sim.bmc("node-00001").ledger if e["action"] == "session_create"]
        assert session_balance(sim, "node-00000") == (1, 1, [])
    plain = [r.getMessage() for r in caplog.records if "over plain http (allowed" in r.getMessage()]
    assert plain == [
        "sending BMC credentials over plain http (allowed by their registry entries) to "
        "2 BMC(s): node-00000, node-00002"
    ]
