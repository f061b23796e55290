"""A body given as pieces (a multipart push: headers, the image's own bytes, the closing
boundary) reaches the BMC as one body with a ``Content-Length``, byte for byte, and is the
same body again when it is sent again after a refusal."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from lockstep_redfish.transport import RetryPolicy, request

pytestmark = pytest.mark.integration
HOST = "127.75.0.1"
IMAGE = bytes(range(256)) * 4096  # 1 MiB: more than one socket write


@pytest.fixture
async def bmc() -> AsyncIterator[tuple[str, list[tuple[str | None, str | None, bytes]]]]:
    """A 'BMC' that keeps (Content-Length, Transfer-Encoding, body) of every POST and answers
    503 to the first one."""
    seen: list[tuple[str | None, str | None, bytes]] = []

    async def push(request: web.Request) -> web.Response:
        headers = request.headers
        seen.append(
            (headers.get("Content-Length"), headers.get("Transfer-Encoding"), await request.read())
        )
        return web.json_response({}, status=503 if len(seen) == 1 else 202)

    app = web.Application(client_max_size=4 * len(IMAGE))
    app.router.add_post("/push", push)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, HOST, 0).start()
    yield f"http://{HOST}:{runner.addresses[0][1]}/push", seen
    await runner.cleanup()


async def test_pieces_arrive_as_one_body_with_a_length_also_when_sent_again(
    bmc: tuple[str, list[tuple[str | None, str | None, bytes]]],
) -> None:
    url, seen = bmc
    pieces = (b"--head\r\n", IMAGE, b"\r\n--tail--\r\n")
    async with aiohttp.ClientSession() as http:
        reply = await request(
            http, "POST", url, RetryPolicy(retries=1, backoff_s=0.01), ssl=False, data=pieces
        )
    assert reply.status == 202
    whole = b"".join(pieces)
    assert seen == [(str(len(whole)), None, whole)] * 2  # not chunked; the retry is whole too
