"""``Started``: ``async with`` for what has ``start()`` and ``stop()`` (simulator, runtime)."""

from __future__ import annotations

from types import TracebackType
from typing import Self


class Started:
    """``async with thing:`` starts it and stops it again, whatever happened inside."""

    async def start(self) -> None:
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()
