"""The planner service's subscriptions: its whole topology at a glance.

It has no consumers yet. Per design.md it will consume:
intent.submitted, bundle.attested, gate.>, device.>.
"""

from __future__ import annotations

from lockstep_common.consumer import Subscription


def subscriptions() -> tuple[Subscription, ...]:
    """Subject -> handler bindings of this service."""
    return ()
