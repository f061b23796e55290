"""The MaxAckPending stall detector: each consumer's ack-pending count read from JetStream.

When a consumer holds ``max_ack_pending`` delivered, unacknowledged messages the server stops
delivering to it, silently: no error reaches the client and no advisory is sent (reliability.md
1.2, the netdata MaxAckPending guide; test plan A7). A handler blocked on a dead dependency
looks, from the process, like an idle stream. So every ``interval_s`` this worker asks the
server for each consumer's ``num_ack_pending`` and ``num_pending`` (``$JS.API.CONSUMER.INFO``)
and exports them beside the limit; ``lockstep_consumer_stalled`` is 1 while the consumer is at
its limit with messages still waiting, which is what the ``LockstepConsumerStalled`` alert reads.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nats.errors import Error as NatsError

from lockstep_common.errors import describe
from lockstep_common.observability import Metrics
from lockstep_common.periodic import Every

if TYPE_CHECKING:
    from lockstep_common.service import Resources

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Watched:
    """One durable consumer: its stream and durable name as the server knows them."""

    stream: str
    durable: str


@dataclass(frozen=True, slots=True)
class AckCounts:
    """What the server reported for one consumer."""

    ack_pending: int
    max_ack_pending: int
    pending: int

    @property
    def stalled(self) -> bool:
        """At the limit with more waiting: the server delivers nothing until an ack comes."""
        return (
            self.max_ack_pending > 0
            and self.ack_pending >= self.max_ack_pending
            and (self.pending > 0)
        )


class ConsumerWatch:
    """Reads each consumer's counts every ``interval_s`` (a ``service.Worker``)."""

    def __init__(
        self, consumers: Sequence[Watched], metrics: Metrics, *, interval_s: float
    ) -> None:
        self.consumers = tuple(consumers)
        self.interval_s = interval_s
        self._metrics = metrics
        self._stalled: set[str] = set()

    def record(self, consumer: Watched, counts: AckCounts) -> None:
        """Export ``counts`` and log when the consumer enters or leaves a stall."""
        m = self._metrics
        name = consumer.durable
        m.consumer_ack_pending.labels(name).set(counts.ack_pending)
        m.consumer_max_ack_pending.labels(name).set(counts.max_ack_pending)
        m.consumer_pending.labels(name).set(counts.pending)
        m.consumer_stalled.labels(name).set(1 if counts.stalled else 0)
        if counts.stalled and name not in self._stalled:
            self._stalled.add(name)
            log.warning(
                "consumer %s stalled: %d of at most %d deliveries unacknowledged, %d waiting; "
                "the server delivers nothing more until a handler finishes",
                name,
                counts.ack_pending,
                counts.max_ack_pending,
                counts.pending,
            )
        elif not counts.stalled and name in self._stalled:
            self._stalled.discard(name)
            log.info("consumer %s delivers again (%d unacknowledged)", name, counts.ack_pending)

    async def poll(self, resources: Resources) -> None:
        """One read of every consumer; one the server cannot answer keeps its last values."""
        for consumer in self.consumers:
            try:
                info = await resources.js.consumer_info(consumer.stream, consumer.durable)
            except (NatsError, OSError, TimeoutError) as exc:
                log.debug("consumer %s: no info: %s", consumer.durable, describe(exc))
                continue
            self.record(
                consumer,
                AckCounts(
                    ack_pending=int(info.num_ack_pending or 0),
                    max_ack_pending=int(info.config.max_ack_pending or 0),
                    pending=int(info.num_pending or 0),
                ),
            )

    async def run(self, resources: Resources, stopping: asyncio.Event) -> None:
        """Poll every ``interval_s`` until stopped."""
        every = Every(self.interval_s, what="consumer ack-pending watch")
        await every.run(lambda: self.poll(resources), stopping)
