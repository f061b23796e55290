"""A rollout's live progress, read once for all who watch it.

Every open rollout page holds an event stream (``server.live``). Read per viewer, ten people
watching a tripped canary at 03:00 would ask the planner ten times every ``poll_s`` for the same
answer; here one ``Feed`` per rollout reads it (when a bus event about the rollout nudges it, and
every ``poll_s`` in between) and every viewer is sent the page part it rendered. The feed starts
with its first viewer and stops with its last.

Contract: a viewer that joins is given the latest part at once (no read of its own when the
feed is running); each change is rendered once and offered to every viewer; a part that did
not change is not sent again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from lockstep_common.periodic import Every
from lockstep_console.nudges import Nudges
from lockstep_console.source import Refused, Unavailable

Read = Callable[[str], Awaitable[str]]


@dataclass
class Feed:
    """One rollout's latest part (``version`` counts its changes) and who is watching."""

    html: str = ""
    version: int = 0
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    viewers: int = 0
    task: asyncio.Task[None] | None = None

    def publish(self, html: str) -> None:
        """A new part: wake every viewer waiting on the last one."""
        if html == self.html:
            return
        self.html, self.version = html, self.version + 1
        woken, self.changed = self.changed, asyncio.Event()
        woken.set()

    async def next(self, seen: int, seconds: float) -> bool:
        """Wait (at most ``seconds``) for a part newer than version ``seen``; True if there is."""
        changed = self.changed
        if self.version == seen:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(seconds):
                    await changed.wait()
        return self.version != seen


class Feeds:
    """The running feeds, by rollout."""

    def __init__(self, read: Read, nudges: Nudges, poll_s: float) -> None:
        self._read, self._nudges, self._poll_s = read, nudges, poll_s
        self._feeds: dict[str, Feed] = {}

    def running(self) -> int:
        """How many rollouts are being read for their viewers."""
        return len(self._feeds)

    @contextlib.asynccontextmanager
    async def follow(self, rollout: str) -> AsyncIterator[Feed]:
        """The rollout's feed for the block, started if nobody watched it yet."""
        feed = self._feeds.get(rollout)
        if feed is None:
            feed = self._feeds[rollout] = Feed()
            feed.task = asyncio.create_task(self._run(rollout, feed))
        feed.viewers += 1
        try:
            yield feed
        finally:
            feed.viewers -= 1
            if feed.viewers == 0:
                del self._feeds[rollout]
                if feed.task is not None:
                    feed.task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await feed.task

    async def _run(self, rollout: str, feed: Feed) -> None:
        with self._nudges.watch(rollout) as woken:

            async def wait(_: asyncio.Event, seconds: float) -> None:
                # Until a bus event about the rollout, or ``poll_s``.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(seconds):
                        await woken.wait()
                woken.clear()

            async def read() -> None:
                feed.publish(await self._read(rollout))

            loop = Every(
                self._poll_s,
                what=f"console live {rollout}",
                pause=wait,
                expected=(Unavailable, Refused),
            )
            await loop.run(read, asyncio.Event())  # until cancelled by its last viewer
