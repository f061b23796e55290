"""A rollout page's live progress is read once for all who watch it (issue 32): two viewers of
one rollout cost one read of the planner per change, not one each, and the reading stops when
the last of them leaves."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer

from lockstep_cli.polling import until
from lockstep_console.nudges import Nudges
from lockstep_console.server import FEEDS, create_app
from tests.unit.console import scenes

pytestmark = pytest.mark.unit
LIVE = f"/rollouts/{scenes.RUNNING}/live"
NUDGE = f"device.failed.{scenes.RUNNING}.node-1"  # any event of the rollout


async def progress(stream: aiohttp.ClientResponse) -> str:
    """The next ``progress`` event's HTML."""
    lines = []
    while (line := (await stream.content.readline()).decode()) != "\n":
        assert line, "the stream ended"
        lines.append(line.rstrip("\n"))
    assert lines[0] == "event: progress", lines
    return "\n".join(x.removeprefix("data: ") for x in lines[1:])


async def test_two_viewers_share_one_read_per_change_and_it_stops_with_them() -> None:
    source, nudges = scenes.source(), Nudges()
    # A poll far longer than the test: every read here is one a nudge (a bus event) asked for.
    client = TestClient(TestServer(create_app(source, nudges=nudges, poll_s=3600.0)))
    await client.start_server()

    def reads() -> int:
        return source.asked.count("rollout.status")

    try:
        one = await client.get(LIVE)
        first = await progress(one)
        two = await client.get(LIVE)  # joins the feed: given its latest part, no read
        assert await progress(two) == first
        assert reads() == 1
        for done in (12, 40):
            source.rollout_states[scenes.RUNNING] = scenes.running(done)
            nudges.nudge(NUDGE)
            seen = [await progress(one), await progress(two)]
            assert seen[0] == seen[1] and f">{done}<" in seen[0]
        # Two viewers, two changes: 3 reads (a viewer reading for itself made it 6).
        assert reads() == 3
        one.close()
        two.close()
        feeds = client.app[FEEDS]

        async def stopped() -> bool:
            nudges.nudge(NUDGE)  # a viewer that left is noticed when it is next woken
            await asyncio.sleep(0)
            return feeds.running() == 0

        await until(stopped, "the feed to stop with its last viewer")
        # Nobody reads for it any more: a bus event about it wakes nothing.
        assert nudges.watching(scenes.RUNNING) == 0
    finally:
        await client.close()
