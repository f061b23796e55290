"""The consumer runtime: durable pull consumers with explicit acks, batches, inbox and DLQ.

Every subscriber in Lockstep runs through ``ConsumerRunner``, which is where the ack policy
lives (``errors.disposition_for``): success -> ack after the commit; transient error ->
a ``-NAK`` whose delay makes the next delivery come after the configured retry backoff
(``ConsumerSpec.nak_delay``: the server offsets nak delays by the consumer's BackOff);
permanent or invalid -> a dead-letter row plus a ``dlq.<subject>`` copy, then ``+TERM`` with the
reason. Nothing is ever acknowledged before the transaction that applied it has committed, and
an event whose id is already in the inbox is acknowledged without effect. An event whose payload
does not belong on the subject it arrived on, or whose ``source`` names no identity allowed to
publish it, is refused as invalid (``provenance``: the subject is what the server checked).

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
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

import asyncpg
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.errors import Error as NatsError
from nats.errors import TimeoutError as NatsTimeout
from nats.js import JetStreamContext

from lockstep_common import deadletter, inbox, provenance
from lockstep_common.backoff import Backoff
from lockstep_common.db import Conn, pooled_transaction
from lockstep_common.envelope import Envelope, EventData, EventRegistry
from lockstep_common.errors import (
    Disposition,
    InvalidMessage,
    describe,
    disposition_for,
    error_kind,
    retry_delay,
)
from lockstep_common.observability import Metrics
from lockstep_common.outbox import Emitter
from lockstep_common.periodic import pause
from lockstep_common.subjects import Namespace
from lockstep_common.topology import ConsumerSpec

log = logging.getLogger(__name__)
_FETCH_BACKOFF = Backoff(0.2, 10.0)  # a failed fetch: 0.4 s doubling to 10 s


class HandlerContext(Emitter):
    """What a handler gets besides its event: the open transaction (``conn``), ``emit``, and
    where the broker stored each event (``stream_seq``).

    Events emitted here are written to the outbox in the same transaction as the handler's
    state changes, just before commit (``outbox.Emitter``: the one way to emit).
    """

    __slots__ = ("_sequences", "consumer")

    def __init__(
        self, conn: Conn, source: str, consumer: str, sequences: Mapping[uuid.UUID, int]
    ) -> None:
        super().__init__(conn, source)
        self.consumer = consumer
        self._sequences = sequences

    def stream_seq(self, env: Envelope[EventData]) -> int:
        """The stream sequence JetStream gave ``env`` when it stored it: the order in which
        events of one stream arrived at the broker. "Newest wins" decisions use it, never the
        sender's ``occurred_at`` (issue 15: a pin dated 2999 won against every later pin).

        Raises:
            LookupError: ``env`` was not delivered to this context.
        """
        try:
            return self._sequences[env.event_id]
        except KeyError:
            raise LookupError(f"event {env.event_id} was not delivered here") from None


E = TypeVar("E", bound=EventData)


@dataclass(frozen=True, slots=True)
class On(Generic[E]):
    """One event class and its handler, which receives exactly that class (checked by mypy:
    ``On(PinChanged, handler)`` needs a handler of ``Envelope[PinChanged]``, or of a union
    that includes it)."""

    event: type[E]
    handler: Callable[[HandlerContext, Envelope[E]], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class OnBatch(Generic[E]):
    """One event class and a handler of every new event of a pulled batch at once, in stream
    order: for consumers whose cost is per statement rather than per event (telemetry)."""

    event: type[E]
    handler: Callable[[HandlerContext, list[Envelope[E]]], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Subscription:
    """A durable consumer and what it does with each event class: declared in a service's
    ``router.py``, and the source of the consumer lists in ``docs/``.

    Give ``handlers`` (one ``On`` per event class) or ``batch`` (one ``OnBatch``). ``ignores``
    names classes that arrive on the subscribed subjects but need nothing from this service:
    they are acknowledged without effect. Any other class is refused as invalid (dead-lettered),
    so a new event type on a subject is never silently dropped. Every handler runs in the
    batch's transaction, and a failed batch is replayed one event per call.
    """

    name: str
    stream: str
    subjects: tuple[str, ...]
    handlers: tuple[On[Any], ...] = ()
    batch: OnBatch[Any] | None = None
    ignores: tuple[type[EventData], ...] = ()
    description: str = ""

    def __post_init__(self) -> None:
        if bool(self.handlers) == (self.batch is not None):
            raise ValueError(f"subscription {self.name}: give exactly one of handlers, batch")
        handled = self.handled
        if len(set(handled)) != len(handled) or set(handled) & set(self.ignores):
            raise ValueError(f"subscription {self.name}: an event class is declared twice")

    @property
    def handled(self) -> tuple[type[EventData], ...]:
        """The event classes this subscription acts on."""
        if self.batch is not None:
            return (self.batch.event,)
        return tuple(on.event for on in self.handlers)

    @property
    def accepts(self) -> tuple[type[EventData], ...]:
        """Every class it takes off the stream: those it acts on, then those it ignores."""
        return self.handled + self.ignores


@dataclass(slots=True)
class RunnerConfig:
    """Pacing and limits of one consumer (from the service's settings)."""

    batch: int = 256
    fetch_timeout_s: float = 1.0
    ack_wait_s: float = 30.0
    max_deliver: int = 5
    retry_backoff_s: tuple[float, ...] = (1.0, 5.0, 15.0, 60.0)
    max_message_bytes: int = 1 << 20
    max_clock_skew_s: float = 300.0
    redelivery_backoff_s: tuple[float, ...] = field(default=())
    max_ack_pending: int = 1000


@dataclass(slots=True)
class _Item:
    msg: Msg
    env: Envelope[EventData]


@dataclass(slots=True)
class _Batch:
    """One pulled batch, decoded: what to apply and what was refused on decode."""

    msgs: list[Msg]
    items: list[_Item]
    invalid: list[tuple[Msg, InvalidMessage]]
    fetched_at: float = 0.0  # time.monotonic() when it arrived


async def retry_after(nc: NatsClient, msg: Msg, consumer: ConsumerSpec, wait_s: float) -> None:
    """Nak ``msg`` so that ``consumer`` redelivers it ``wait_s`` from now, whatever its BackOff."""
    delay = consumer.nak_delay(msg.metadata.num_delivered, wait_s)
    # Written by hand rather than ``msg.nak(delay=...)``: nats-py 2.16 sends no delay when it is
    # 0 (``if delay:`` in nats/aio/msg.py), and a bare -NAK is redelivered at once, while a delay
    # of 0 or less can be exactly what ``nak_delay`` asks for.
    if msg.reply:
        await nc.publish(msg.reply, b"-NAK " + json.dumps({"delay": round(delay * 1e9)}).encode())


def consumer_spec(sub: Subscription, config: RunnerConfig) -> ConsumerSpec:
    """The durable pull consumer ``sub`` needs with ``config``'s delivery settings."""
    return ConsumerSpec(
        durable=sub.name,
        stream=sub.stream,
        filter_subjects=sub.subjects,
        ack_wait_s=config.ack_wait_s,
        max_deliver=config.max_deliver,
        redelivery_backoff_s=config.redelivery_backoff_s,
        max_ack_pending=config.max_ack_pending,
        description=sub.description,
    )


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
        self._handlers = {on.event: on.handler for on in sub.handlers}
        self._accepts = frozenset(sub.accepts)
        # When a pull last reached the server and came back, with messages or after waiting its
        # time on an idle stream: readiness fails when this falls behind (a consumer deleted
        # under us, a stalled loop), instead of /readyz staying 200 over a dead subscription.
        self.last_pull = time.monotonic()
        self._consumer = self.spec()

    def spec(self) -> ConsumerSpec:
        """The durable consumer this runner needs (checked by the start-up self-check)."""
        return consumer_spec(self.sub, self._cfg)

    def stop(self) -> None:
        """Finish the batch in hand, then return from ``run``."""
        self._stopping.set()

    def pulling(self, now: float) -> bool:
        """True while pulls keep completing: the last one ended less than a few fetch timeouts
        (or one AckWait, for a batch being applied) ago."""
        allowed = max(5 * self._cfg.fetch_timeout_s, self._cfg.ack_wait_s)
        return now - self.last_pull <= allowed

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
                    try:
                        batch = await fetching
                    except (NatsTimeout, TimeoutError):
                        # An idle stream: a fetch that waited its time and got nothing is
                        # normal (nats-py raises its own TimeoutError or, on some paths, the
                        # builtin one). Only the fetch: a timeout while applying is a failure.
                        self.last_pull = time.monotonic()
                        continue
                    failures = 0
                    self.last_pull = time.monotonic()
                    ahead = asyncio.ensure_future(self._fetch(psub))
                    # Acks after a commit may fail on a broken connection: safe, because the
                    # redelivered message meets the inbox. So transport errors only pause us.
                    await self._process(batch)
                except (NatsError, OSError) as exc:
                    # A failure while processing leaves a prefetch in flight: hand it back, so
                    # there is never a second fetch or an orphaned batch.
                    await self._release(ahead)
                    ahead = None
                    failures += 1
                    await self._pause(_FETCH_BACKOFF.delay(failures), exc)
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
        if self._stopping.is_set():
            return  # the connection closing under a stopping consumer is not news
        log.warning(
            "consumer %s: fetch failed, retrying in %.1fs: %s", self.durable, seconds, describe(exc)
        )
        await pause(self._stopping, seconds)

    def _decode_all(self, msgs: list[Msg]) -> _Batch:
        batch = _Batch(msgs, [], [])
        for msg in msgs:
            try:
                batch.items.append(_Item(msg, self._decode(msg)))
            except InvalidMessage as exc:
                batch.invalid.append((msg, exc))
            except Exception as exc:  # noqa: BLE001 - a decoder failure is the message's fault
                # Whatever a hostile body makes the decoder raise, it is that message that is
                # invalid: dead-letter it, never stop the consumer (which would redeliver the
                # whole batch until its neighbours ran out of deliveries too).
                invalid = InvalidMessage(f"message could not be decoded: {exc!r}"[:500])
                batch.invalid.append((msg, invalid))
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

    def _decode(self, msg: Msg) -> Envelope[EventData]:
        env = self._registry.decode(msg.data, max_bytes=self._cfg.max_message_bytes)
        ahead = (env.occurred_at - datetime.now(UTC)).total_seconds()
        if ahead > self._cfg.max_clock_skew_s:
            # The sender's clock is not trusted: a time far ahead would win every newest-wins
            # decision downstream until the real clock caught up (a pin dated 2999 did).
            raise InvalidMessage(
                f"{env.type} is dated {ahead:.0f}s in the future, beyond the allowed clock skew "
                f"of {self._cfg.max_clock_skew_s:.0f}s"
            )
        if type(env.data) not in self._accepts:
            raise InvalidMessage(
                f"consumer {self.durable} does not accept {env.type} v{env.schema_version} "
                f"on subject {msg.subject}"
            )
        # The subject is what the server checked against the publisher's grants; the payload
        # and the envelope's source are what the publisher wrote (``provenance``).
        provenance.check(env, self._logical(msg.subject))
        return env

    async def _apply(self, items: list[_Item]) -> None:
        # Finish well inside AckWait, or JetStream would redeliver what we are still applying.
        async with (
            asyncio.timeout(self._cfg.ack_wait_s * 0.8),
            pooled_transaction(self._pool) as conn,
        ):
            fresh = await inbox.claim(conn, self.durable, [i.env.event_id for i in items])
            sequences: dict[uuid.UUID, int] = {}
            for item in items:  # a duplicate inside one batch: the first copy is applied
                sequences.setdefault(item.env.event_id, item.msg.metadata.sequence.stream)
            ctx = HandlerContext(conn, self._source, self.durable, sequences)
            new: list[Envelope[EventData]] = []
            for item in items:
                if item.env.event_id in fresh:
                    fresh.discard(item.env.event_id)  # a duplicate inside one batch
                    new.append(item.env)
                else:
                    self._metrics.messages.labels(self.durable, "duplicate").inc()
            if self.sub.batch is not None:
                mine = [env for env in new if type(env.data) is self.sub.batch.event]
                if mine:
                    await self.sub.batch.handler(ctx, mine)
            else:
                for env in new:
                    handler = self._handlers.get(type(env.data))
                    if handler is not None:  # else a class the subscription ignores
                        await handler(ctx, env)
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
            await retry_after(self._nc, msg, self._consumer, delay)
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
            await retry_after(
                self._nc, msg, self._consumer, retry_delay(delivery, self._cfg.retry_backoff_s)
            )
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
