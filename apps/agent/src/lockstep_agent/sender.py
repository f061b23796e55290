"""Publish what the spool holds to JetStream and forget each report once it is acknowledged.

Reports go out oldest first, pipelined (nats-py ``publish_async``) in batches, each with its
own id as ``Nats-Msg-Id``; one is deleted from the spool only when JetStream acknowledged it.
A report whose ack did not come (NATS away, the stream's leader moving) stays and is sent again
with the same id on the next ``drain``; the stream's duplicate window (``StreamPolicy``,
10 minutes by default) stores it once if the first send was in fact stored.

No backoff of its own: the caller drains once per report cycle and when the connection comes
back (nats-py reconnects by itself, with its own jittered wait).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass

import nats.errors
from nats.js import JetStreamContext
from nats.js.api import PubAck

from lockstep_agent.spool import Outgoing, Spool
from lockstep_common.envelope import MSG_ID_HEADER

log = logging.getLogger(__name__)
_NATS_ERRORS = (nats.errors.Error, OSError, asyncio.TimeoutError)


@dataclass(slots=True)
class SendStats:
    """Counters since the sender started."""

    acked: int = 0
    duplicates: int = 0
    """Acknowledged as already stored: a retry the duplicate window dropped."""
    failed: int = 0
    """Publishes that raised or were not acknowledged in time (the report stays spooled)."""


class Sender:
    """Drains ``spool`` into JetStream.

    Args:
        js: the JetStream context of the agent's own connection.
        spool: where the reports wait.
        batch: most reports in flight at once.
        ack_timeout_s: how long a batch's acks are waited for.
    """

    def __init__(
        self, js: JetStreamContext, spool: Spool, *, batch: int = 256, ack_timeout_s: float = 5.0
    ) -> None:
        self._js = js
        self._spool = spool
        self._batch = batch
        self._ack_timeout_s = ack_timeout_s
        self.stats = SendStats()

    async def drain(self) -> bool:
        """Publish every spooled report. True when the spool is empty afterwards; False at the
        first batch not wholly acknowledged (the rest waits for the next drain)."""
        while True:
            batch = self._spool.pending(self._batch)
            if not batch:
                return True
            acked = await self._send(batch)
            self._spool.acked(acked)
            if len(acked) < len(batch):
                return False

    async def _send(self, batch: list[Outgoing]) -> list[str]:
        futures: list[tuple[Outgoing, asyncio.Future[PubAck]]] = []
        try:
            for report in batch:
                fut = await self._js.publish_async(
                    report.subject, report.payload, headers={MSG_ID_HEADER: report.msg_id}
                )
                futures.append((report, fut))
        except _NATS_ERRORS as exc:
            log.warning("publish failed, the reports stay spooled: %s", exc)
        if futures:
            await asyncio.wait([f for _, f in futures], timeout=self._ack_timeout_s)
        acked: list[str] = []
        for report, fut in futures:
            if not fut.done():
                fut.cancel()
                continue
            if fut.cancelled() or fut.exception() is not None:
                continue
            acked.append(report.msg_id)
            if fut.result().duplicate:
                self.stats.duplicates += 1
        self.stats.acked += len(acked)
        self.stats.failed += len(batch) - len(acked)
        if len(acked) < len(batch):
            # Let cancelled futures' callbacks run (nats-py frees their in-flight slots).
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(0)
        return acked
