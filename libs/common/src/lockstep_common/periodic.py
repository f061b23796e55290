"""One periodic loop for every service's background work (reapers, sweeps, gauges, pollers).

``Every(interval_s, what=...).run(work, stopping)`` calls ``work`` until ``stopping`` is set,
waiting ``interval_s`` between rounds; the wait ends early when ``stopping`` is set, so a
service stops within one round of work, never one interval. The contract each copy of this
loop used to restate by hand:

- a round that raises is logged (an error named in ``expected`` as one warning line, anything
  else with its traceback) and the loop goes on: one bad round never ends a background worker;
- a round that returns ``True`` found more to do: the next one starts at once (a claim loop
  drains its queue, then polls);
- ``jitter`` (a fraction of the interval) draws each wait from ``[interval * (1 - jitter),
  interval]``, so replicas started together spread their rounds instead of all polling at once;
- cancelling the task running ``run`` ends it (``CancelledError`` is never swallowed);
- the wait is ``pause(stopping, seconds)``, injectable: a test counts rounds and sets
  ``stopping`` without sleeping.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

Pause = Callable[[asyncio.Event, float], Awaitable[None]]


async def pause(stopping: asyncio.Event, seconds: float) -> None:
    """Wait ``seconds``, or less if ``stopping`` is set meanwhile."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stopping.wait(), timeout=seconds)


async def stopped_after(stopping: asyncio.Event, seconds: float) -> bool:
    """``pause``, then whether stopping was asked for (for loops whose wait comes first)."""
    await pause(stopping, seconds)
    return stopping.is_set()


@dataclass(frozen=True, slots=True)
class Every:
    """A loop that runs some work every ``interval_s`` until stopped (see the module doc)."""

    interval_s: float
    what: str = "periodic work"  # names the loop in its log lines
    jitter: float = 0.0  # 0 <= jitter <= 1, a fraction of the interval
    wait_first: bool = False  # wait one interval before the first round
    expected: tuple[type[Exception], ...] = ()  # logged as one line, without a traceback
    pause: Pause = pause
    rng: random.Random = field(default_factory=random.Random)

    def __post_init__(self) -> None:
        if self.interval_s < 0 or not 0.0 <= self.jitter <= 1.0:
            raise ValueError(
                f"{self.what}: interval_s must be >= 0 and jitter in [0, 1], "
                f"not {self.interval_s} and {self.jitter}"
            )

    def delay(self) -> float:
        """The next wait: the interval, less up to ``jitter`` of it."""
        if not self.jitter:
            return self.interval_s
        return self.interval_s * (1.0 - self.jitter * self.rng.random())

    async def run(self, work: Callable[[], Awaitable[object]], stopping: asyncio.Event) -> None:
        """Call ``work`` every interval until ``stopping`` is set."""
        if self.wait_first:
            await self.pause(stopping, self.delay())
        while not stopping.is_set():
            again = False
            try:
                again = (await work()) is True
            except self.expected as exc:
                log.warning("%s failed (next in %gs): %s", self.what, self.interval_s, exc)
            except Exception:
                log.exception("%s failed (next in %gs)", self.what, self.interval_s)
            if not again and not stopping.is_set():
                await self.pause(stopping, self.delay())
