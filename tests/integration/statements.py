"""The statements a pool sends, as asyncpg's query logger sees them (tests that count round
trips to PostgreSQL)."""

from __future__ import annotations

import asyncio
from typing import Any


class Sent:
    """Every statement sent on the connections it is added to as a query logger."""

    def __init__(self) -> None:
        self.queries: list[str] = []

    def __call__(self, record: Any) -> None:
        self.queries.append(record.query)

    async def taken(self) -> list[str]:
        """The statements sent since the last call, and start counting again."""
        await asyncio.sleep(0)  # the logger is called soon after each statement, not in it
        taken, self.queries = self.queries, []
        return taken
