"""Hears the inventory's ``fleet.changed`` (core NATS) and tells this process's wave snapshots
(``wave_facts.WaveFacts.changed``): :class:`FleetChanges`, a service worker.

Every updater process hears every announcement (a plain subscription, no queue group: each
process holds its own copies). An announcement is believed only as far as it can do no harm:
it names nodes to read again, never facts, so one that is malformed, of another type or too
large is dropped with a warning and changes nothing, and a forged or repeated one costs at
most a read of the nodes it names. Only the inventory may publish the subject (``bus_access``).
Announcements missed (at most once; the connection lost) are covered by the snapshot's bound on
a copy's age and by its dropping every copy after a reconnect (``WaveFacts(epoch=...)``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

from nats.aio.msg import Msg

from lockstep_common import provenance, subjects
from lockstep_common.errors import InvalidMessage
from lockstep_common.events import REGISTRY
from lockstep_common.events.v1 import FleetChanged
from lockstep_common.service import Resources
from lockstep_common.subjects import Namespace

log = logging.getLogger(__name__)
MAX_BYTES = 256 << 10
"""A page of ``MAX_FLEET_PAGE`` node ids and versions is well under this."""


class Listener(Protocol):
    def changed(self, node_id: str, version: int) -> None: ...


class FleetChanges:
    """Subscribes to ``fleet.changed`` while the service runs and passes each entry heard to
    the listeners ``tell`` gave it (the executor's ``WaveFacts``)."""

    def __init__(self, namespace: Namespace) -> None:
        self._subject = namespace.wire(subjects.fleet_changed())
        self._listeners: list[Listener] = []
        self.subscribed = asyncio.Event()

    def tell(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def heard(self, data: bytes) -> int:
        """Pass on one announcement; returns how many entries (0: dropped)."""
        try:
            env = REGISTRY.decode(data, max_bytes=MAX_BYTES)
            provenance.check(env, subjects.fleet_changed())  # the inventory's, on its subject
        except InvalidMessage as exc:
            log.warning("fleet.changed dropped, nothing changed: %s", exc)
            return 0
        event = env.data
        if not isinstance(event, FleetChanged):  # belongs on its subject: cannot happen
            return 0
        for entry in event.nodes:
            for listener in self._listeners:
                listener.changed(entry.node_id, entry.version)
        return len(event.nodes)

    async def run(self, resources: Resources, stopping: asyncio.Event) -> None:
        async def on_message(msg: Msg) -> None:
            self.heard(msg.data)

        sub = await resources.nc.subscribe(self._subject, cb=on_message)
        self.subscribed.set()
        try:
            await stopping.wait()
        finally:
            await sub.unsubscribe()


def reconnects(resources: Resources) -> Callable[[], int]:
    """How many times the service's NATS connection came back (``WaveFacts(epoch=...)``)."""
    return lambda: int(resources.nc.stats["reconnects"])
