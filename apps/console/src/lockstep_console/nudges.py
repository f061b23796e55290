"""Bus events as nudges: something about a rollout (or the fleet) changed, ask again.

The console subscribes, as ``reader``, to the events that identity may read
(``docs/bus-access.md``): rollouts planned, halted, completed; gate verdicts; devices failed or
rolled back; drift detected, resolved, stragglers. An event is never shown: it only wakes the
pages watching its rollout (``rollout.<kind>.<rollout>``, ``gate.<verdict>.<rollout>``,
``device.<outcome>.<rollout>.<node>``: the third token) or the fleet (``drift.*``), which then
ask the owning service again. So nothing in an event is believed, and a lost or forged event
costs at most one extra read.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from lockstep_common.subjects import Namespace

if TYPE_CHECKING:
    from nats.aio.client import Client as NatsClient
    from nats.aio.msg import Msg

FLEET = "fleet"  # the key the fleet page watches
ANY = "*"  # the key of the rollouts list: every rollout's events
# What the reader may subscribe to, without the namespace (bus_access: reader).
PATTERNS = (
    "rollout.*.*",
    "gate.*.*",
    "device.failed.*.*",
    "device.rolled_back.*.*",
    "drift.>",
)


def key_of(subject: str) -> str | None:
    """The page key a subject (namespace removed) concerns, None for one not understood."""
    tokens = subject.split(".")
    if tokens[0] in ("rollout", "gate", "device") and len(tokens) >= 3:
        return tokens[2]
    if tokens[0] == "drift":
        return FLEET
    return None


class Nudges:
    """Pages watching keys, and the events that wake them."""

    def __init__(self) -> None:
        self._watchers: dict[str, set[asyncio.Event]] = defaultdict(set)

    @contextmanager
    def watch(self, key: str) -> Iterator[asyncio.Event]:
        """An event set each time ``key`` is nudged, for the duration of the block."""
        woken = asyncio.Event()
        self._watchers[key].add(woken)
        try:
            yield woken
        finally:
            self._watchers[key].discard(woken)
            if not self._watchers[key]:
                del self._watchers[key]

    def nudge(self, subject: str) -> None:
        """Wake the pages ``subject`` concerns (and the rollouts list for a rollout's)."""
        key = key_of(subject)
        if key is None:
            return
        for k in (key, ANY) if key != FLEET else (key,):
            for woken in self._watchers.get(k, ()):
                woken.set()

    def watching(self, key: str) -> int:
        return len(self._watchers.get(key, ()))


async def subscribe(nc: NatsClient, namespace: str, nudges: Nudges) -> None:
    """Nudge ``nudges`` with every event of ``PATTERNS`` in ``namespace`` on ``nc``."""
    ns = Namespace(namespace)

    async def on_event(msg: Msg) -> None:
        with contextlib.suppress(ValueError):  # a subject outside the namespace
            nudges.nudge(ns.logical(msg.subject))

    for pattern in PATTERNS:
        await nc.subscribe(ns.wire(pattern), cb=on_event)
