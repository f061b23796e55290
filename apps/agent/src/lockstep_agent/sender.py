"""Publish buffered reports to JetStream; forget each one only once it is acknowledged.

One implementation for a real node (its one spool, its one connection) and for the simulator
(thousands of nodes' buffers, each node on its own connection): ``Sender.send`` takes reports
as ``Queued`` (the buffer it waits in, the report, the JetStream context of its node's
connection) and publishes them in order, pipelined (nats-py ``publish_async``) and bounded by
``max_in_flight``, each with its own id as ``Nats-Msg-Id``.

A report leaves its buffer only on JetStream's acknowledgement. The pass stops at the first
publish that raises (NATS away); acks not back within ``ack_timeout_s`` are given up (their
futures cancelled, their in-flight slots returned) and those reports stay buffered for the
next pass, sent again with the same id, which the stream's duplicate window (``StreamPolicy``,
10 minutes by default) stores once. A ``stopping`` event cuts the wait to ``stop_grace_s`` so
stopping stays prompt even when the server went quiet.

No backoff or loop of its own: the caller decides when to send again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import nats.errors
from nats.js import JetStreamContext
from nats.js.api import PubAck

from lockstep_agent.spool import Outgoing, ReportBuffer
from lockstep_common.envelope import MSG_ID_HEADER

log = logging.getLogger(__name__)
_NATS_ERRORS = (nats.errors.Error, OSError, asyncio.TimeoutError)
_SENT_MEMORY = 1 << 18


@dataclass(frozen=True, slots=True)
class Queued:
    """A report to send: where it waits, what it is, on which connection it goes."""

    buffer: ReportBuffer
    report: Outgoing
    js: JetStreamContext


@dataclass(slots=True)
class SendStats:
    """Counters since the sender was made (read them; do not write)."""

    acked: int = 0
    duplicates: int = 0
    """Acknowledged as already stored (a retry the duplicate window dropped)."""
    errors: int = 0
    """Publishes that raised or were not acknowledged."""
    retried: int = 0
    """Publishes of a report sent before and not acknowledged then."""
    failed_passes: int = 0
    """Passes cut short or left unacknowledged by a NATS error (the reports stay buffered)."""


@dataclass(slots=True)
class _Pass:
    pending: set[asyncio.Future[PubAck]] = field(default_factory=set)
    acked: list[Queued] = field(default_factory=list)
    failed: int = 0


class Sender:
    """Publishes ``Queued`` reports (see the module docstring).

    Args:
        max_in_flight: most unacknowledged publishes at once.
        ack_timeout_s: how long a pass waits for its acks (and for a free slot).
        stop_grace_s: how long the in-flight acks get once ``stopping`` is set.
        stopping: set when the owner stops.
    """

    def __init__(
        self,
        *,
        max_in_flight: int = 256,
        ack_timeout_s: float = 5.0,
        stop_grace_s: float = 1.0,
        stopping: asyncio.Event | None = None,
    ) -> None:
        self.ack_timeout_s = ack_timeout_s
        self.stop_grace_s = stop_grace_s
        self._slots = asyncio.Semaphore(max_in_flight)
        self._stopping = stopping or asyncio.Event()
        # Ids sent and not yet acknowledged, to count retries; bounded (oldest forgotten), since
        # a report dropped from a full buffer is never acknowledged.
        self._sent: OrderedDict[str, None] = OrderedDict()
        self.stats = SendStats()

    async def send(self, queued: Iterable[Queued]) -> tuple[bool, list[Queued]]:
        """Publish ``queued`` in order and wait (bounded) for the acks.

        Returns:
            (True when every report was acknowledged, the reports acknowledged); the
            acknowledged ones are gone from their buffers.
        """
        run = _Pass()
        ok = True
        for q in queued:
            if self._stopping.is_set():
                break
            try:
                await self._publish(run, q)
            except _NATS_ERRORS as exc:
                log.warning("publish failed, the reports stay buffered: %s", exc)
                self.stats.errors += 1
                ok = False
                break
        ok = await self._settle(run) and ok
        if not ok:
            self.stats.failed_passes += 1
        return ok, run.acked

    async def _publish(self, run: _Pass, q: Queued) -> None:
        await self._acquire_slot()
        try:
            fut = await q.js.publish_async(
                q.report.subject, q.report.payload, headers={MSG_ID_HEADER: q.report.msg_id}
            )
        except BaseException:
            self._slots.release()
            raise
        if q.report.msg_id in self._sent:
            self.stats.retried += 1
        self._sent[q.report.msg_id] = None
        while len(self._sent) > _SENT_MEMORY:
            self._sent.popitem(last=False)
        run.pending.add(fut)
        fut.add_done_callback(lambda f: self._done(run, f, q))

    async def _acquire_slot(self) -> None:
        """Take an in-flight slot; raise TimeoutError if acks stop coming back.

        Without the bound a server that stops acknowledging would park the sender here
        forever (and its owner's stop with it): the slots are only returned by acks.
        """
        if not self._slots.locked():
            await self._slots.acquire()
            return
        deadline = time.monotonic() + self.ack_timeout_s
        while True:
            if self._stopping.is_set() or time.monotonic() > deadline:
                raise TimeoutError("no publish acknowledgements are coming back")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._slots.acquire(), timeout=0.1)
                return

    def _done(self, run: _Pass, fut: asyncio.Future[PubAck], q: Queued) -> None:
        self._slots.release()
        run.pending.discard(fut)
        if fut.cancelled() or fut.exception() is not None:
            run.failed += 1
            return
        q.buffer.acked([q.report.msg_id])
        self._sent.pop(q.report.msg_id, None)
        run.acked.append(q)
        self.stats.acked += 1
        if fut.result().duplicate:
            self.stats.duplicates += 1

    async def _settle(self, run: _Pass) -> bool:
        """Wait (bounded) for the pass's acks; cancel and count the ones that never came."""
        if run.pending:
            acks: asyncio.Future[Any] = asyncio.gather(*run.pending, return_exceptions=True)
            stopper: asyncio.Future[Any] = asyncio.ensure_future(self._stopping.wait())
            await asyncio.wait(
                {acks, stopper}, timeout=self.ack_timeout_s, return_when=asyncio.FIRST_COMPLETED
            )
            stopper.cancel()
            if run.pending and self._stopping.is_set():
                await asyncio.wait(set(run.pending), timeout=self.stop_grace_s)
        late = set(run.pending)
        for fut in late:
            fut.cancel()
        if late:
            # Let the cancel callbacks run so the in-flight slots are returned.
            await asyncio.sleep(0)
        if run.failed:
            self.stats.errors += run.failed
            log.warning("%d publishes were not acknowledged", run.failed)
        return run.failed == 0


async def drain(sender: Sender, buffer: ReportBuffer, js: JetStreamContext, batch: int) -> bool:
    """Send everything ``buffer`` holds, ``batch`` reports per pass; True when it is empty."""
    while True:
        reports = buffer.pending(batch)
        if not reports:
            return True
        ok, _ = await sender.send(Queued(buffer, r, js) for r in reports)
        if not ok:
            return False
