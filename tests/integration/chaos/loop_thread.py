"""One long-lived asyncio event loop in a background thread, for synchronous callers.

Hypothesis runs a ``RuleBasedStateMachine``'s rules as plain functions, many programs in a row,
while the services under test hold asyncpg pools, NATS connections and aiohttp servers that
belong to the loop they were created on. A loop of our own in a background thread keeps all of
them on one loop for the whole run, and, unlike ``loop.run_until_complete`` called rule by
rule, keeps it running *between* rules: the services, the simulated BMCs and the node agents
work on while Hypothesis draws the next step, as a fleet does while an operator looks away.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from tests.speed import scaled

T = TypeVar("T")


class LoopThread:
    """``with LoopThread() as lt: lt.run(coro())`` runs ``coro`` on the thread's loop."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="chaos-loop", daemon=True
        )

    def __enter__(self) -> LoopThread:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=30)
        self.loop.close()

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float = 120.0) -> T:
        """The coroutine's result (or its exception), waiting at most ``timeout_s`` on the
        reference machine (``tests.speed``: longer on a slower one)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(scaled(timeout_s))

    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` on the loop's thread: the simulator's state (faults, drains)
        is only ever touched there, between two of its awaits, never concurrently."""

        async def call() -> T:
            return fn(*args, **kwargs)

        return self.run(call())
