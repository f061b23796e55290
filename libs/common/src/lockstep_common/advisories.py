"""Turns JetStream's dead-letter advisories into dead-letter records.

A message that exhausts ``max_deliver`` without ever being settled by our runtime (a consumer
that crashed or hung every time) produces only a ``MAX_DELIVERIES`` advisory, and stays in its
stream (nats.docs, consumers.md). The advisory stream keeps those advisories; this watcher reads
the ones about its own service's consumers, fetches the original message by stream sequence,
and records it like any other dead letter. ``MSG_TERMINATED`` advisories for messages the
runtime already recorded are idempotent no-ops.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging

import asyncpg
from nats.aio.msg import Msg
from nats.errors import Error as NatsError
from nats.errors import TimeoutError as NatsTimeout
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from lockstep_common import deadletter
from lockstep_common.db import OUTAGE
from lockstep_common.errors import describe
from lockstep_common.periodic import pause
from lockstep_common.subjects import Namespace
from lockstep_common.topology import ADVISORY_MAX_DELIVERIES, ADVISORY_TERMINATED, ConsumerSpec

log = logging.getLogger(__name__)


def watcher_durable(service: str) -> str:
    """The base name of ``service``'s advisory watcher's durable."""
    return f"{service}-dlq-watch"


def watcher_spec(service: str, watched: list[tuple[str, str]]) -> ConsumerSpec:
    """The watcher's consumer: advisories about ``watched`` (stream, durable) pairs only."""
    filters = tuple(
        f"{kind}.{stream}.{durable}"
        for stream, durable in watched
        for kind in (ADVISORY_MAX_DELIVERIES, ADVISORY_TERMINATED)
    )
    return ConsumerSpec(
        durable=watcher_durable(service),
        stream="ADVISORIES",
        filter_subjects=filters,
        max_deliver=20,
        description=f"Dead-letter advisories for {service}'s consumers",
        namespaced_filters=False,
    )


class AdvisoryWatcher:
    """Records dead letters that only JetStream's advisories know about."""

    def __init__(
        self, js: JetStreamContext, pool: asyncpg.Pool, namespace: Namespace, spec: ConsumerSpec
    ) -> None:
        self._js = js
        self._pool = pool
        self._ns = namespace
        self._spec = spec
        self._stopping = asyncio.Event()

    def stop(self) -> None:
        """Return from ``run`` after the message in hand."""
        self._stopping.set()

    async def run(self) -> None:
        """Watch until stopped."""
        psub = await self._js.pull_subscribe_bind(
            durable=self._ns.durable(self._spec.durable), stream=self._ns.stream("ADVISORIES")
        )
        try:
            while not self._stopping.is_set():
                try:
                    msgs = await psub.fetch(32, timeout=1.0)
                    for msg in msgs:
                        await self._handle(msg)
                except (NatsTimeout, TimeoutError):
                    continue  # nothing happened: the usual case
                except (NatsError, OSError) as exc:
                    if self._stopping.is_set():
                        break
                    log.warning("advisory watcher: NATS error, pausing: %s", describe(exc))
                    await pause(self._stopping, 2.0)
        finally:
            with contextlib.suppress(Exception):
                await psub.unsubscribe()

    async def _handle(self, msg: Msg) -> None:
        try:
            advisory = json.loads(msg.data)
            stream, seq = str(advisory["stream"]), int(advisory["stream_seq"])
            consumer, deliveries = str(advisory["consumer"]), int(advisory.get("deliveries", 0))
        except (ValueError, KeyError, TypeError) as exc:
            log.error("advisory watcher: unreadable advisory dropped: %s", exc)
            await msg.term()
            return
        try:
            await self._record(msg.subject, advisory, stream, seq, consumer, deliveries)
        except OUTAGE as exc:
            log.warning("advisory watcher: cannot record yet, will retry: %s", exc)
            await msg.nak(delay=2.0)
            return
        await msg.ack()

    async def _record(
        self,
        subject: str,
        advisory: dict[str, object],
        stream: str,
        seq: int,
        consumer: str,
        deliveries: int,
    ) -> None:
        payload: bytes | None
        try:
            original = await self._js.get_msg(stream, seq)
            payload, original_subject = original.data, str(original.subject)
        except NotFoundError:
            # Gone from its stream (max_age or limits): keep the row, and file the copy under
            # dlq.expired.<stream> since the original subject is unknown.
            payload, original_subject = None, f"expired.{stream}"
        if subject.startswith(ADVISORY_MAX_DELIVERIES):
            reason = f"not acknowledged after {deliveries} deliveries (consumer crashed or hung)"
            kind = "MaxDeliveriesExceeded"
        else:
            reason = f"terminated: {advisory.get('reason') or 'no reason given'}"
            kind = "Terminated"
        with contextlib.suppress(ValueError):
            original_subject = self._ns.logical(original_subject)
        async with self._pool.acquire() as conn:
            await deadletter.record(
                conn,
                deadletter.DeadLetter(
                    consumer=consumer,
                    stream=stream,
                    stream_seq=seq,
                    subject=original_subject,
                    payload=payload,
                    reason=reason,
                    error_kind=kind,
                    deliveries=deliveries,
                    detected_by="advisory",
                ),
            )
