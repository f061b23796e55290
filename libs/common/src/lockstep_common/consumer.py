"""The consumer runtime: durable pull consumers with explicit acks, batches, inbox and DLQ.

Every subscriber in Lockstep runs through ``ConsumerRunner``, which is where the ack policy
lives (``errors.disposition_for``): success -> ack after the commit; transient error ->
``nak(delay)`` with the configured backoff; permanent or invalid -> a dead-letter row plus a
``dlq.<subject>`` copy, then ``+TERM`` with the reason. Nothing is ever acknowledged before the
transaction that applied it has committed, and an event whose id is already in the inbox is
acknowledged without effect.

Batches are applied in one transaction (the fast path). If that transaction fails, the batch is
replayed one message per transaction, so one bad message cannot hold back its neighbours and
each failure is settled on its own.

We drive nats-py directly rather than through FastStream: FastStream's NATS subscribers default
to ``REJECT_ON_ERROR`` (term on any exception), swallow ack errors, and cost 4-9x raw nats-py
per message here (research/perf.md section 3); this module is the whole of what we need.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import asyncpg
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.errors import Error as NatsError
from nats.errors import TimeoutError as NatsTimeout
from nats.js import JetStreamContext

from lockstep_common import deadletter, inbox
from lockstep_common.db import Conn
from lockstep_common.envelope import Envelope, EventData, EventRegistry, make_envelope
from lockstep_common.errors import (
    Disposition,
    InvalidMessage,
    disposition_for,
    error_kind,
    retry_delay,
)
from lockstep_common.observability import Metrics
from lockstep_common.outbox import OutboxMessage, enqueue
from lockstep_common.subjects import Namespace
from lockstep_common.topology import ConsumerSpec

log = logging.getLogger(__name__)


class HandlerContext:
    """What a handler gets besides its event: the open transaction and a way to emit events.

    Events emitted here are written to the outbox in the same transaction as the handler's
    state changes, just before commit.
    """

    def __init__(self, conn: Conn, source: str, consumer: str) -> None:
        self.conn = conn
        self.source = source
        self.consumer = consumer
        self._pending: list[OutboxMessage] = []

    def emit(
        self,
        subject: str,
        data: EventData,
        *,
        about: str | None = None,
        correlation_id: str | None = None,
        event_id: uuid.UUID | None = None,
    ) -> Envelope[EventData]:
        """Queue an event for the outbox; returns its envelope."""
        env = make_envelope(
            data,
            source=self.source,
            subject=about,
            correlation_id=correlation_id,
            event_id=event_id,
        )
        self._pending.append(OutboxMessage.of(subject, env))
        return env

    async def flush(self) -> None:
        """Write queued events to the outbox (called by the runtime before commit)."""
        pending, self._pending = self._pending, []
        await enqueue(self.conn, pending)


Handler = Callable[[HandlerContext, Envelope[Any]], Awaitable[None]]
BatchHandler = Callable[[HandlerContext, list[Envelope[Any]]], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Subscription:
    """A handler bound to a durable consumer: declared in a service's ``router.py``.

    ``handler`` gets one event at a time; a ``batch_handler`` (given instead) gets every new
    event of a pulled batch at once, in stream order, for consumers whose cost is per
    statement rather than per event (telemetry ingest). Both run in the batch's transaction,
    and a failed batch is replayed one event per call either way.
    """

    name: str
    stream: str
    subjects: tuple[str, ...]
    handler: Handler | None
    accepts: tuple[type[EventData], ...]
    description: str = ""
    batch_handler: BatchHandler | None = None

    def __post_init__(self) -> None:
        if (self.handler is None) == (self.batch_handler is None):
            raise ValueError(
                f"subscription {self.name}: give exactly one of handler, batch_handler"
            )


@dataclass(slots=True)
class RunnerConfig:
    """Pacing and limits of one consumer (from the service's settings)."""

    batch: int = 256
    fetch_timeout_s: float = 1.0
    ack_wait_s: float = 30.0
    max_deliver: int = 5
    retry_backoff_s: tuple[float, ...] = (1.0, 5.0, 15.0, 60.0)
    max_message_bytes: int = 1 << 20
    redelivery_backoff_s: tuple[float, ...] = field(default=())


@dataclass(slots=True)
class _Item:
    msg: Msg
    env: Envelope[Any]


@dataclass(slots=True)
class _Batch:
    """One pulled batch, decoded: what to apply and what was refused on decode."""

    msgs: list[Msg]
    items: list[_Item]
    invalid: list[tuple[Msg, InvalidMessage]]
    fetched_at: float = 0.0  # time.monotonic() when it arrived


class ConsumerRunner:
    """Pulls batches for one subscription and settles every message explicitly."""

    def __init__(
        self,
        sub: Subscription,
        *,
        nc: NatsClient,
        js: JetStreamContext,
        pool: asyncpg.Pool,
        namespace: Namespace,
        registry: EventRegistry,
        metrics: Metrics,
        source: str,
        config: RunnerConfig,
    ) -> None:
        self.sub = sub
        self._nc = nc
        self._js = js
        self._pool = pool
        self._ns = namespace
        self._registry = registry
        self._metrics = metrics
        self._source = source
        self._cfg = config
        self._stopping = asyncio.Event()
        self.durable = namespace.durable(sub.name)
        self.stream = namespace.stream(sub.stream)

    def spec(self) -> ConsumerSpec:
        """The durable consumer this runner needs (checked by the start-up self-check)."""
        return ConsumerSpec(
            durable=self.sub.name,
            stream=self.sub.stream,
            filter_subjects=self.sub.subjects,
            ack_wait_s=self._cfg.ack_wait_s,
            max_deliver=self._cfg.max_deliver,
            redelivery_backoff_s=self._cfg.redelivery_backoff_s,
            description=self.sub.description,
        )

    def stop(self) -> None:
        """Finish the batch in hand, then return from ``run``."""
        self._stopping.set()

    async def run(self) -> None:
        """Pull and process until stopped.

        The next batch is fetched and decoded while the current one is applied (one fetch in
        flight at a time, so stream order is kept): decoding runs while the apply waits on the
        database, and the consumer never waits on a round trip to the server between two
        commits. Messages prefetched when we stop are nak'ed so another replica gets them at
        once instead of after AckWait.
        """
        psub = await self._js.pull_subscribe_bind(durable=self.durable, stream=self.stream)
        failures = 0
        ahead: asyncio.Future[_Batch] | None = None
        try:
            while not self._stopping.is_set():
                try:
                    fetching, ahead = ahead or asyncio.ensure_future(self._fetch(psub)), None
                    batch = await fetching
                    failures = 0
                    ahead = asyncio.ensure_future(self._fetch(psub))
                    # Acks after a commit may fail on a broken connection: safe, because the
                    # redelivered message meets the inbox. So transport errors only pause us.
                    await self._process(batch)
                except NatsTimeout:
                    continue
                except (NatsError, OSError) as exc:
                    # A failure while processing leaves a prefetch in flight: hand it back, so
                    # there is never a second fetch or an orphaned batch.
                    await self._release(ahead)
                    ahead = None
                    failures += 1
                    await self._pause(min(0.2 * 2**failures, 10.0), exc)
        finally:
            await self._release(ahead)
            with contextlib.suppress(Exception):
                await psub.unsubscribe()

    async def _fetch(self, psub: Any) -> _Batch:
        msgs: list[Msg] = await psub.fetch(self._cfg.batch, timeout=self._cfg.fetch_timeout_s)
        batch = self._decode_all(msgs)
        batch.fetched_at = time.monotonic()
        return batch

    async def _release(self, ahead: asyncio.Future[_Batch] | None) -> None:
        """Hand back a prefetched batch we will not process (stopping)."""
        if ahead is None:
            return
        if not ahead.done():
            ahead.cancel()
        with contextlib.suppress(BaseException):
            for msg in (await ahead).msgs:
                await msg.nak()

    async def _pause(self, seconds: float, exc: BaseException) -> None:
        log.warning("consumer %s: fetch failed, retrying in %.1fs: %s", self.durable, seconds, exc)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), timeout=seconds)

    def _decode_all(self, msgs: list[Msg]) -> _Batch:
        batch = _Batch(msgs, [], [])
        for msg in msgs:
            try:
                batch.items.append(_Item(msg, self._decode(msg)))
            except InvalidMessage as exc:
                batch.invalid.append((msg, exc))
        return batch

    async def _process(self, batch: _Batch) -> None:
        started = time.perf_counter()
        if time.monotonic() - batch.fetched_at > 0.2 * self._cfg.ack_wait_s:
            # Prefetched and kept waiting behind the previous batch: restart its AckWait, so
            # the apply's own bound (0.8 AckWait) holds from now (JetStream "+WPI").
            for item in batch.items:
                await item.msg.in_progress()
        for msg, exc in batch.invalid:
            await self._settle_failure(msg, exc)
        items = batch.items
        if items:
            try:
                await self._apply(items)
            except Exception as exc:  # noqa: BLE001 - any failure sends us to the per-message path
                if len(items) == 1:
                    await self._settle_failure(items[0].msg, exc)
                else:
                    log.info(
                        "consumer %s: batch of %d failed (%s); retrying one by one",
                        self.durable,
                        len(items),
                        exc,
                    )
                    await self._apply_one_by_one(items)
            else:
                await self._ack_all(items)
        self._metrics.batch_seconds.labels(self.durable).observe(time.perf_counter() - started)

    def _decode(self, msg: Msg) -> Envelope[Any]:
        env = self._registry.decode(msg.data, max_bytes=self._cfg.max_message_bytes)
        if not isinstance(env.data, self.sub.accepts):
            raise InvalidMessage(
                f"consumer {self.durable} does not accept {env.type} v{env.schema_version} "
                f"on subject {msg.subject}"
            )
        return env

    async def _apply(self, items: list[_Item]) -> None:
        # Finish well inside AckWait, or JetStream would redeliver what we are still applying.
        async with (
            asyncio.timeout(self._cfg.ack_wait_s * 0.8),
            self._pool.acquire() as conn,
            conn.transaction(),
        ):
            fresh = await inbox.claim(conn, self.durable, [i.env.event_id for i in items])
            ctx = HandlerContext(conn, self._source, self.durable)
            new: list[Envelope[Any]] = []
            for item in items:
                if item.env.event_id in fresh:
                    fresh.discard(item.env.event_id)  # a duplicate inside one batch
                    new.append(item.env)
                else:
                    self._metrics.messages.labels(self.durable, "duplicate").inc()
            if self.sub.batch_handler is not None:
                if new:
                    await self.sub.batch_handler(ctx, new)
            elif self.sub.handler is not None:
                for env in new:
                    await self.sub.handler(ctx, env)
            await ctx.flush()

    async def _apply_one_by_one(self, items: list[_Item]) -> None:
        for item in items:
            try:
                # Each replay gets its own AckWait: the ones before it may have used it up.
                await item.msg.in_progress()
                await self._apply([item])
            except Exception as exc:  # noqa: BLE001 - settled by the ack policy below
                await self._settle_failure(item.msg, exc)
            else:
                await self._ack_all([item])

    async def _ack_all(self, items: list[_Item]) -> None:
        for item in items:
            await item.msg.ack()
        self._metrics.messages.labels(self.durable, "acked").inc(len(items))

    async def _settle_failure(self, msg: Msg, exc: BaseException) -> None:
        delivery = msg.metadata.num_delivered
        decision = disposition_for(exc, delivery=delivery, max_deliver=self._cfg.max_deliver)
        if decision is Disposition.RETRY:
            delay = retry_delay(delivery, self._cfg.retry_backoff_s)
            log.warning(
                "consumer %s: delivery %d of seq %d failed, retry in %.1fs: %s",
                self.durable,
                delivery,
                msg.metadata.sequence.stream,
                delay,
                exc,
            )
            await msg.nak(delay=delay)
            self._metrics.messages.labels(self.durable, "retried").inc()
            return
        await self._dead_letter(msg, exc, delivery)

    async def _dead_letter(self, msg: Msg, exc: BaseException, delivery: int) -> None:
        reason = str(exc) or type(exc).__name__
        letter = deadletter.DeadLetter(
            consumer=self.durable,
            stream=self.stream,
            stream_seq=msg.metadata.sequence.stream,
            subject=self._logical(msg.subject),
            payload=msg.data,
            reason=reason,
            error_kind=error_kind(exc),
            deliveries=delivery,
            detected_by="consumer",
        )
        try:
            async with self._pool.acquire() as conn:
                await deadletter.record(conn, letter)
        except Exception as db_exc:  # noqa: BLE001 - never term what we could not record
            log.error(
                "consumer %s: cannot record dead letter (will retry): %s", self.durable, db_exc
            )
            await msg.nak(delay=retry_delay(delivery, self._cfg.retry_backoff_s))
            return
        log.error(
            "consumer %s: dead-lettered seq %d after %d deliveries: %s",
            self.durable,
            letter.stream_seq,
            delivery,
            reason,
        )
        # +TERM with a reason (nats-server 2.10.4+) puts it in the MSG_TERMINATED advisory too.
        if msg.reply:
            await self._nc.publish(msg.reply, b"+TERM " + reason[:200].encode())
        self._metrics.messages.labels(self.durable, "dead_lettered").inc()
        self._metrics.dead_letters.labels(self.durable, letter.error_kind).inc()

    def _logical(self, wire_subject: str) -> str:
        try:
            return self._ns.logical(wire_subject)
        except ValueError:
            return wire_subject
