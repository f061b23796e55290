"""The attest service's subscriptions: its whole topology at a glance.

Consumes ``bundle.submitted`` (a job per submission) and ``pin.changed.>`` (for anti-rollback);
emits ``bundle.attested`` / ``bundle.rejected`` from its worker through the outbox.
"""

from __future__ import annotations

from lockstep_attest.adapters.repository import joined
from lockstep_attest.handlers import Handlers
from lockstep_common import subjects
from lockstep_common.consumer import On, Subscription
from lockstep_common.envelope import EventData
from lockstep_common.events.v1 import BundleAttested, BundleRejected, BundleSubmitted, PinChanged

# The event classes this service publishes (its worker, through the outbox): with
# ``subscriptions()``, the source of the producer and consumer lists in docs/.
EMITS: tuple[type[EventData], ...] = (BundleAttested, BundleRejected)


def subscriptions(handlers: Handlers) -> tuple[Subscription, ...]:
    """Subject -> handler bindings of this service."""
    return (
        Subscription(
            name="attest-bundles",
            stream="BUNDLES",
            subjects=(subjects.bundle_submitted(),),
            handlers=(On(BundleSubmitted, joined(handlers.bundle_submitted)),),
            description="Bundles to verify",
        ),
        Subscription(
            name="attest-pins",
            stream="PINS",
            subjects=(subjects.pin_changed_all(),),
            handlers=(On(PinChanged, joined(handlers.pin_changed)),),
            description="Pinned stacks, for anti-rollback",
        ),
    )
