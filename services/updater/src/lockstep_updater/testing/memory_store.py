"""An in-memory ``UpdaterStore`` for unit tests of handlers and the worker (no PostgreSQL).

It keeps the PostgreSQL store's semantics (adapters/repository.py): one item per rollout and
node, recorded once per wave; claims take the oldest free non-final item (or one whose lease
lapsed), bump the fencing token and count an attempt; every state change goes through
``domain.steps.transition``; a transaction's changes and events commit together when its block
ends and vanish if it raises. Its clock (PostgreSQL's ``now()``) stands still until a test calls
:meth:`MemoryStore.advance`.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from lockstep_common.envelope import source_of
from lockstep_common.testing import RecordedEvents
from lockstep_updater.testing.memory_remedies import MemoryRemedies
from lockstep_updater.testing.memory_rollouts import MemoryRollouts
from lockstep_updater.testing.memory_steps import MemorySteps
from lockstep_updater.testing.memory_tables import (
    HELD,
    START,
    Item,
    Tables,
    Wave,
)
from lockstep_updater.testing.memory_waves import MemoryWaves

__all__ = ["HELD", "START", "Item", "MemoryStore", "MemoryTx", "Wave"]


class MemoryStore:
    """The updater store in a few dicts; ``events`` holds what committed transactions emitted."""

    def __init__(
        self,
        *,
        source: str = source_of("updater"),
        now: datetime = START,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.now = now
        self._clock = clock  # a running clock (benchmarks) instead of one tests move
        self.events = RecordedEvents(source=source)
        self._tables = Tables()
        self._source = source

    @property
    def items(self) -> list[Item]:
        """Every work item, in id order."""
        return [self._tables.items[i] for i in sorted(self._tables.items)]

    def item(self, node_id: str) -> Item:
        """The (latest) work item of ``node_id``."""
        return [i for i in self.items if i.node_id == node_id][-1]

    def advance(self, seconds: float) -> None:
        """Move the store's clock on (leases lapse)."""
        self.now += timedelta(seconds=seconds)

    def statement(self) -> AbstractAsyncContextManager[MemoryTx]:
        """A single statement's unit of work: here, a transaction (``PooledStore.statement``)."""
        return self.transaction()

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[MemoryTx]:
        """Changes and events made through the yielded tx commit when the block ends."""
        # The append-only lists are cut back on a rollback, not copied: a copy of every step
        # ever recorded made each transaction slower than the last (``bench update``).
        tables = self._tables
        steps, republished = len(tables.steps), len(tables.republished)
        before = copy.deepcopy(replace(tables, steps=[], republished=[]))
        now = self.now if self._clock is None else self._clock()
        tx = MemoryTx(tables, RecordedEvents(source=self._source), now)
        try:
            yield tx
        except BaseException:
            before.steps, before.republished = (
                tables.steps[:steps],
                tables.republished[:republished],
            )
            self._tables = before
            raise
        self.events.emitted.extend(tx.events.emitted)


@dataclass(slots=True)
class MemoryTx(MemoryRollouts, MemoryRemedies, MemorySteps, MemoryWaves):
    """An ``UpdaterTx`` on the store's tables; ``now`` is fixed for the transaction. One part
    per module, as the PostgreSQL store's."""

    tables: Tables
    events: RecordedEvents
    now: datetime
