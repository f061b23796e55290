"""``IdleClaims``: the claim loops that found nothing share one database poll.

Each of the ``workers`` claim loops used to poll on its own timer when nothing was claimable,
so an idle updater ran ``workers / worker_poll_s`` claim transactions a second (256 loops at
0.2 s: 1,280 a second, most of the updater's CPU in ``lockstep bench rollout`` while a small
wave, a soak or a gate left most loops with nothing to do). Now one idle loop polls and the
others park. A claim that finds work wakes ``FAN_OUT`` parked loops (there may be more), and
each of them that claims wakes as many again, so a released wave still reaches every loop
within a poll and a few claims; a woken loop that finds nothing parks again, or polls if no
loop does.
"""

from __future__ import annotations

import asyncio
from collections import deque

from lockstep_common.periodic import pause

FAN_OUT = 2


class IdleClaims:
    """Where idle claim loops wait (one event loop; not thread-safe)."""

    def __init__(self, poll_s: float) -> None:
        self.poll_s = poll_s
        self.polling = False
        self._parked: deque[asyncio.Future[None]] = deque()

    @property
    def parked(self) -> int:
        """Loops waiting for a claim to find work."""
        return sum(1 for waiter in self._parked if not waiter.done())

    def found(self) -> None:
        """A claim found work: wake up to ``FAN_OUT`` parked loops."""
        woken = 0
        while self._parked and woken < FAN_OUT:
            waiter = self._parked.popleft()
            if not waiter.done():
                waiter.set_result(None)
                woken += 1

    async def wait(self, stopping: asyncio.Event) -> None:
        """Nothing was claimable: return when this loop should claim again, or on stop."""
        if not self.polling:
            self.polling = True
            try:
                await pause(stopping, self.poll_s)
            finally:
                self.polling = False
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._parked.append(waiter)
        stop = asyncio.ensure_future(stopping.wait())
        try:
            await asyncio.wait((waiter, stop), return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            waiter.cancel()  # a no-op once woken; otherwise found() skips it
