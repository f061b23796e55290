"""The inventory service's subscriptions: its whole topology at a glance.

It has no consumers yet. Per design.md it will consume:
pin.changed.> (pins), telemetry.observed.inventory.> (in-band reports), device.>;
admission.check (request/reply).
"""

from __future__ import annotations

from lockstep_common.consumer import Subscription


def subscriptions() -> tuple[Subscription, ...]:
    """Subject -> handler bindings of this service."""
    return ()
