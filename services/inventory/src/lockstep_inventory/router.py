"""The inventory service's subscriptions: its whole topology at a glance.

Consumes in-band reports (``telemetry.observed.inventory.>``, in batches), pins
(``pin.changed.>``), wave boundaries (``wave.>``, ``rollout.halted|completed.*``) and device
steps (``device.>``); emits ``drift.detected`` / ``drift.resolved`` through the outbox, and
``fleet.changed`` (core NATS) as a registry change commits (``adapters.announce``).
Its other inputs are not JetStream consumers: the Redfish sweep (``SweepWorker``) and the
``admission.check`` and ``fleet.query`` request/reply (``responder.Responder``) and the
operator commands (``operator_commands.COMMANDS``), started in ``app.py``.
"""

from __future__ import annotations

from lockstep_common import subjects
from lockstep_common.consumer import On, OnBatch, Subscription
from lockstep_common.envelope import EventData
from lockstep_common.events.v1 import (
    AdmissionCheckAnswered,
    AdmissionCheckRequested,
    DeviceActivated,
    DeviceFailed,
    DeviceRolledBack,
    DeviceStaged,
    DeviceVerified,
    DriftDetected,
    DriftResolved,
    FleetChanged,
    FleetGoldenAnswered,
    FleetGoldenRequested,
    FleetImportAnswered,
    FleetImportRequested,
    FleetQueryAnswered,
    FleetQueryRequested,
    FleetSweepAnswered,
    FleetSweepRequested,
    FleetSweptAnswered,
    FleetSweptRequested,
    InventoryObserved,
    OpsRefused,
    PinChanged,
    RolloutCompleted,
    RolloutHalted,
    WaveCompleted,
    WavePlanned,
)
from lockstep_inventory.adapters.pg_store import joined
from lockstep_inventory.handlers import Handlers
from lockstep_inventory.operator_commands import COMMANDS

# Core NATS request/reply subjects this service answers (``responder.Responder``); not stored,
# so not a subscription, but consumed all the same.
ANSWERS: tuple[type[EventData], ...] = (
    AdmissionCheckRequested,
    FleetQueryRequested,
    *(c.request for c in COMMANDS),
    FleetGoldenRequested,
    FleetImportRequested,
    FleetSweepRequested,
    FleetSweptRequested,
)
# The event classes this service publishes: drift through the outbox, and the replies.
# With ``subscriptions()`` and ``ANSWERS``, the source of the producer and consumer lists in docs/.
EMITS: tuple[type[EventData], ...] = (
    DriftDetected,
    DriftResolved,
    FleetChanged,
    AdmissionCheckAnswered,
    FleetQueryAnswered,
    OpsRefused,
    *(c.answer for c in COMMANDS),
    FleetGoldenAnswered,
    FleetImportAnswered,
    FleetSweepAnswered,
    FleetSweptAnswered,
)


def subscriptions(handlers: Handlers) -> tuple[Subscription, ...]:
    """Subject -> handler bindings of this service."""
    return (
        Subscription(
            name="inventory-telemetry",
            stream="TELEMETRY",
            subjects=(subjects.inventory_observed_all(),),
            batch=OnBatch(InventoryObserved, joined.batch(handlers.inventory_observed)),
            description="In-band inventory reports from node agents",
        ),
        Subscription(
            name="inventory-pins",
            stream="PINS",
            subjects=(subjects.pin_changed_all(),),
            handlers=(On(PinChanged, joined(handlers.pin_changed)),),
            description="Pinned golden stacks, to judge drift against",
        ),
        Subscription(
            name="inventory-waves",
            stream="ROLLOUTS",
            subjects=(subjects.waves_all(), *subjects.rollout_ends()),
            handlers=(
                On(WavePlanned, joined(handlers.wave_planned)),
                On(WaveCompleted, joined(handlers.wave_completed)),
                On(RolloutHalted, joined(handlers.rollout_ended)),
                On(RolloutCompleted, joined(handlers.rollout_ended)),
            ),
            description="Active waves: drift inside one is pending",
        ),
        Subscription(
            name="inventory-devices",
            stream="DEVICES",
            subjects=(subjects.devices_all(),),
            handlers=(
                On(DeviceActivated, joined(handlers.device_changed)),
                On(DeviceVerified, joined(handlers.device_changed)),
                On(DeviceRolledBack, joined(handlers.device_changed)),
            ),
            # Staging, or a failed step, leaves the running version as it was.
            ignores=(DeviceStaged, DeviceFailed),
            description="Rollout steps: changes they explain are not unexpected",
        ),
    )
