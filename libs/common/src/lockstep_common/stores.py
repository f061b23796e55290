"""The PostgreSQL side every service's store shares: transactions that carry their events.

A service's store is a Protocol (its domain's words) with an in-memory fake and a PostgreSQL
adapter; the adapter's transaction object (``Tx``) wraps a connection inside an open
transaction and the sink its events go to. Two ways to get one, the same for every service:
- ``PooledStore.transaction()``: a pooled connection for a worker, its events committed to the
  outbox with the transaction (``outbox.emitting``);
- ``in_runtime_transaction(make_tx, handler)``: a handler run inside the consumer runtime's
  transaction, so its writes, its inbox claim and its events commit or roll back together;
  ``Joined(make_tx)`` is that for one service's transaction type (its ``joined``).
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Generic, TypeVar

import asyncpg

from lockstep_common.consumer import HandlerContext
from lockstep_common.db import Conn
from lockstep_common.envelope import Envelope, EventData
from lockstep_common.outbox import EventSink, emitting

Tx = TypeVar("Tx")
T = TypeVar("T")
E = TypeVar("E", bound=EventData)


class PooledStore(Generic[Tx]):
    """A store on a service's pool (its connections' search_path is the service's schema).

    Args:
        pool: the service's pool.
        source: the CloudEvents source of what its transactions emit.
        make_tx: builds the service's transaction object from a connection and an event sink.
    """

    def __init__(
        self, pool: asyncpg.Pool, source: str, make_tx: Callable[[Conn, EventSink], Tx]
    ) -> None:
        self._pool = pool
        self._source = source
        self._make_tx = make_tx

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Tx]:
        """A pooled connection's transaction; its events commit to the outbox with it."""
        async with self._pool.acquire() as conn, emitting(conn, self._source) as out:
            yield self._make_tx(conn, out)


def in_runtime_transaction(
    make_tx: Callable[[Conn, EventSink], T],
    handler: Callable[[T, Envelope[E]], Awaitable[None]],
) -> Callable[[HandlerContext, Envelope[E]], Awaitable[None]]:
    """``handler`` run in the consumer runtime's transaction (its inbox claim and outbox)."""

    @functools.wraps(handler)
    async def run(ctx: HandlerContext, env: Envelope[E]) -> None:
        await handler(make_tx(ctx.conn, ctx), env)

    return run


class Joined(Generic[T]):
    """A service's ``joined``: ``joined(handler)`` is ``in_runtime_transaction(make_tx,
    handler)`` for the service's own transaction type, declared once in its repository
    (``joined = Joined(PostgresTx)``) instead of a wrapper function per service."""

    __slots__ = ("_make_tx",)

    def __init__(self, make_tx: Callable[[Conn, EventSink], T]) -> None:
        self._make_tx = make_tx

    def __call__(
        self, handler: Callable[[T, Envelope[E]], Awaitable[None]]
    ) -> Callable[[HandlerContext, Envelope[E]], Awaitable[None]]:
        return in_runtime_transaction(self._make_tx, handler)
