"""The one clock every service reads time through.

Code that decides something from the time (a deadline, a soak's end, a lease's expiry) takes a
``Clock`` instead of calling ``time.time()`` or ``datetime.now()`` itself, so a test can stand
still, jump a soak forward, or replay a crash at an exact instant without sleeping. ``now()`` is
the wall clock (aware UTC: what is persisted and compared across processes); ``monotonic()`` is
for measuring how long something in this process took and never goes backwards.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    """What a step, handler or worker may ask about time."""

    def now(self) -> datetime:
        """The wall-clock time, timezone-aware UTC."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards (only differences mean anything)."""
        ...


class SystemClock:
    """The real clock."""

    __slots__ = ()

    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()


SYSTEM_CLOCK: Clock = SystemClock()


class WallOnly:
    """A bare ``() -> datetime`` as a clock (an older hook that moved only the wall clock, as
    the updater's maintenance windows once took): its ``now``, and the system's monotonic."""

    __slots__ = ("_now",)

    def __init__(self, now: Callable[[], datetime]) -> None:
        self._now = now

    def now(self) -> datetime:
        return self._now()

    def monotonic(self) -> float:
        return SYSTEM_CLOCK.monotonic()


class ManualClock:
    """A clock that moves only when told to: for tests and the simulator's virtual time."""

    __slots__ = ("_monotonic", "_now")

    def __init__(self, start: datetime | None = None) -> None:
        start = start or datetime(2026, 1, 1, tzinfo=UTC)
        if start.tzinfo is None:
            raise ValueError("ManualClock needs a timezone-aware start")
        self._now = start.astimezone(UTC)
        self._monotonic = 0.0

    def now(self) -> datetime:
        return self._now

    def monotonic(self) -> float:
        return self._monotonic

    def advance(self, seconds: float) -> None:
        """Move both clocks forward by ``seconds`` (never backwards)."""
        if seconds < 0:
            raise ValueError("a clock does not go backwards")
        self._now += timedelta(seconds=seconds)
        self._monotonic += seconds
