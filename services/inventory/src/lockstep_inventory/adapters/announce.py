"""``fleet.changed``: registry changes announced to every updater process (issue 28 item 3).

An updater serves a wave's steps from its copy of the wave's nodes (``lockstep_updater.adapters
.wave_facts``) and must read a node anew once its registry entry changed. The inventory says so
here, with each changed entry's new ``version`` and no facts, as the change's transaction
commits: published on core NATS from inside it, so an announcement can reach an updater just
before the change is visible, and the updater then keeps reading the node until a read returns
that version.

Why core NATS and not the outbox: the copy to drop is in every updater process, and a durable
JetStream consumer hands each message to one process of the service only, while a consumer per
process would need the right to create consumers, which services are denied
(``bus_access``: nats-server #8274). A core-NATS message is at most once: one lost (the
inventory stopped between the publish and the commit, an updater disconnected) is covered by
the updater's own bound on a copy's age (``WaveFacts.ttl_s``) and by its dropping every copy
when its connection comes back.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from nats.aio.client import Client as NatsClient

from lockstep_common import subjects
from lockstep_common.envelope import make_envelope
from lockstep_common.events.v1 import MAX_FLEET_PAGE, FleetChanged, NodeVersion
from lockstep_common.subjects import Namespace

Announce = Callable[[Mapping[str, int]], Awaitable[None]]
"""Announce registry entries changed: node id -> its version now."""


async def unannounced(changed: Mapping[str, int]) -> None:
    """Announce nothing (no updater listens: a bench, a test of the registry alone)."""
    del changed


def on_bus(nc: Callable[[], NatsClient], namespace: Namespace, source: str) -> Announce:
    """Announce on ``fleet.changed``, a page of ``MAX_FLEET_PAGE`` nodes per message, on the
    connection ``nc`` gives when called (the started service's)."""
    subject = namespace.wire(subjects.fleet_changed())

    async def announce(changed: Mapping[str, int]) -> None:
        entries = [NodeVersion(node_id=n, version=v) for n, v in sorted(changed.items())]
        for first in range(0, len(entries), MAX_FLEET_PAGE):
            page = FleetChanged(nodes=tuple(entries[first : first + MAX_FLEET_PAGE]))
            await nc().publish(subject, make_envelope(page, source=source).to_json())

    return announce
