"""Waiting for an observable outcome (the demo and benchmarks synchronise on state, not time)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def until(
    check: Callable[[], Awaitable[T | None]],
    what: str,
    timeout_s: float = 30.0,
    poll_s: float = 0.02,
) -> T:
    """Await ``check()`` every ``poll_s`` until it returns something truthy, and return that;
    :class:`TimeoutError` naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = await check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        await asyncio.sleep(poll_s)
