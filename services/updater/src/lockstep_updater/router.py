"""The updater service's subscriptions: its whole topology at a glance.

It has no consumers yet. Per design.md it will consume:
wave.planned.>, gate.tripped.>.
"""

from __future__ import annotations

from lockstep_common.consumer import Subscription
from lockstep_common.envelope import EventData

# The event classes this service publishes (none yet): with ``subscriptions()``, the source of
# the producer and consumer lists in docs/.
EMITS: tuple[type[EventData], ...] = ()


def subscriptions() -> tuple[Subscription, ...]:
    """Subject -> handler bindings of this service."""
    return ()
