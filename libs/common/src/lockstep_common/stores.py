"""The PostgreSQL side every service's store shares: transactions that carry their events.

A service's store is a Protocol (its domain's words) with an in-memory fake and a PostgreSQL
adapter; the adapter's transaction object (``Tx``) wraps a connection inside an open
transaction and the sink its events go to. Two ways to get one, the same for every service:
- ``PooledStore.transaction()``: a pooled connection for a worker, its events committed to the
  outbox with the transaction (as ``outbox.emitting``), the connection back in the pool
  without a reset round trip (``db.pooled_transaction``);
- ``JoinedAt(make_tx)`` (a service's ``joined``): a handler run inside the consumer runtime's
  transaction, so its writes, its inbox claim and its events commit or roll back together.

One service shape (issue 28 item 5): a handler is ``(tx, env, *, now)`` (:class:`Handler`, or
:class:`BatchHandler` over a pulled batch) on the service's unit of work (a ``Tx`` with
``events``, :class:`UnitOfWork`), and ``JoinedAt(make_tx)`` runs it in the consumer runtime's
transaction with ``now`` read from one clock, so a handler never reads the time itself, never
sees the runtime's context, and is unit-tested on the in-memory store at any instant.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Generic, Protocol, TypeVar

import asyncpg

from lockstep_common.clock import SYSTEM_CLOCK, Clock
from lockstep_common.consumer import HandlerContext
from lockstep_common.db import Conn, pooled_statement
from lockstep_common.envelope import Envelope, EventData
from lockstep_common.outbox import EventSink, pooled_emitting

Tx = TypeVar("Tx")
T = TypeVar("T")
E = TypeVar("E", bound=EventData)
Tx_contra = TypeVar("Tx_contra", contravariant=True)
E_contra = TypeVar("E_contra", bound=EventData, contravariant=True)


class UnitOfWork(Protocol):
    """What every service's transaction object (its ``Tx``) has besides its own words: where
    the events that commit with its changes go."""

    @property
    def events(self) -> EventSink:
        """Events emitted here are written to the outbox in this transaction."""
        ...


class Handler(Protocol[Tx_contra, E_contra]):
    """A handler of one event: what it changes is a function of the unit of work, the event
    and the time, so a test runs it on the in-memory store at any ``now``."""

    def __call__(
        self, tx: Tx_contra, env: Envelope[E_contra], /, *, now: datetime
    ) -> Awaitable[None]: ...


class BatchHandler(Protocol[Tx_contra, E_contra]):
    """A handler of every new event of a pulled batch at once, in stream order (``OnBatch``)."""

    def __call__(
        self, tx: Tx_contra, envs: Sequence[Envelope[E_contra]], /, *, now: datetime
    ) -> Awaitable[None]: ...


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
        async with pooled_emitting(self._pool, self._source) as out:
            yield self._make_tx(out.conn, out)

    @asynccontextmanager
    async def statement(self) -> AsyncIterator[Tx]:
        """A unit of work of one statement (``db.pooled_statement``): one round trip, not
        three, for a single read or a single write that needs nothing else in its transaction
        (a lease renewal, a claim). A second statement raises before it is sent, and so does an
        event (nothing could commit it with the statement)."""
        async with pooled_statement(self._pool) as conn:
            yield self._make_tx(conn, _NoEvents(self._source))


class _NoEvents(EventSink):
    """The sink of a one-statement unit of work: an event there has no transaction to join."""

    __slots__ = ()

    def _keep(self, subject: str, env: Envelope[EventData]) -> None:
        raise RuntimeError(f"{subject}: an event needs a transaction, not a single statement")


class JoinedAt(Generic[T]):
    """A service's ``joined`` in the one service shape: ``joined(handler)`` (or
    ``joined.batch(handler)``) runs a :class:`Handler` in the consumer runtime's transaction,
    on the unit of work ``make_tx`` builds from its connection and context (the context is the
    event sink, and says where the broker stored each event), with ``now`` from ``clock``.

    Declared once in a service's repository (``joined = JoinedAt(PostgresTx)``) and used by its
    ``router.subscriptions(handlers)``; the handlers themselves never import it.
    """

    __slots__ = ("_clock", "_make_tx")

    def __init__(
        self, make_tx: Callable[[Conn, HandlerContext], T], clock: Clock = SYSTEM_CLOCK
    ) -> None:
        self._make_tx = make_tx
        self._clock = clock

    def __call__(
        self, handler: Handler[T, E]
    ) -> Callable[[HandlerContext, Envelope[E]], Awaitable[None]]:
        @functools.wraps(handler)
        async def run(ctx: HandlerContext, env: Envelope[E]) -> None:
            await handler(self._make_tx(ctx.conn, ctx), env, now=self._clock.now())

        return run

    def batch(
        self, handler: BatchHandler[T, E]
    ) -> Callable[[HandlerContext, list[Envelope[E]]], Awaitable[None]]:
        @functools.wraps(handler)
        async def run(ctx: HandlerContext, envs: list[Envelope[E]]) -> None:
            await handler(self._make_tx(ctx.conn, ctx), envs, now=self._clock.now())

        return run
