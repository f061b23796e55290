"""The planner service's subscriptions: its whole topology at a glance.

Consumes attested bundles (``bundle.attested``), intents (``intent.submitted``), wave
completions and gate verdicts (``wave.completed.*``, ``gate.>``) and device steps
(``device.>``) and operators' maintenance windows (``maintenance.requested``); emits rollouts,
waves, pins and the windows it holds through the outbox, and asks the inventory for
the fleet (``fleet.query``, core-NATS request/reply from its worker).
"""

from __future__ import annotations

from lockstep_common import subjects
from lockstep_common.consumer import On, Subscription
from lockstep_common.envelope import EventData
from lockstep_common.events.v1 import (
    BundleAttested,
    DeviceActivated,
    DeviceFailed,
    DeviceRolledBack,
    DeviceStaged,
    DeviceVerified,
    FleetQueryRequested,
    GateInconclusive,
    GatePassed,
    GateTripped,
    IntentSubmitted,
    MaintenanceWindowsChanged,
    MaintenanceWindowsRequested,
    PinChanged,
    RolloutCompleted,
    RolloutHalted,
    RolloutPlanned,
    WaveCompleted,
    WavePlanned,
)
from lockstep_planner.adapters.repository import joined
from lockstep_planner.handlers import Handlers

# The event classes this service publishes (through the outbox), and the fleet.query request
# it sends: with ``subscriptions()``, the source of the producer and consumer lists and of the
# NATS permission matrix in docs/.
EMITS: tuple[type[EventData], ...] = (
    RolloutPlanned,
    WavePlanned,
    RolloutHalted,
    RolloutCompleted,
    PinChanged,
    MaintenanceWindowsChanged,
    FleetQueryRequested,
)


def subscriptions(handlers: Handlers) -> tuple[Subscription, ...]:
    """Subject -> handler bindings of this service."""
    return (
        Subscription(
            name="planner-bundles",
            stream="BUNDLES",
            subjects=(subjects.bundle_attested(),),
            handlers=(On(BundleAttested, joined(handlers.bundle_attested)),),
            description="Attested bundles: the only ones a rollout may move to",
        ),
        Subscription(
            name="planner-intents",
            stream="INTENTS",
            subjects=(subjects.intent_submitted(),),
            handlers=(On(IntentSubmitted, joined(handlers.intent_submitted)),),
            description="Intents to plan (one rollout per intent id)",
        ),
        Subscription(
            name="planner-waves",
            stream="ROLLOUTS",
            subjects=("wave.completed.*",),
            handlers=(On(WaveCompleted, joined(handlers.wave_completed)),),
            description="Waves the updater finished: their soak starts",
        ),
        Subscription(
            name="planner-gates",
            stream="GATES",
            subjects=("gate.>",),
            handlers=(
                On(GatePassed, joined(handlers.gate)),
                On(GateTripped, joined(handlers.gate)),
                On(GateInconclusive, joined(handlers.gate)),
            ),
            description="Healthgate verdicts: release, halt or pause",
        ),
        Subscription(
            name="planner-devices",
            stream="DEVICES",
            subjects=(subjects.devices_all(),),
            handlers=(
                On(DeviceStaged, joined(handlers.device_step)),
                On(DeviceActivated, joined(handlers.device_step)),
                On(DeviceVerified, joined(handlers.device_step)),
                On(DeviceFailed, joined(handlers.device_step)),
                On(DeviceRolledBack, joined(handlers.device_step)),
            ),
            description="Device steps, for live progress",
        ),
        Subscription(
            name="planner-maintenance",
            stream="MAINTENANCE",
            subjects=(subjects.maintenance_requested(),),
            handlers=(On(MaintenanceWindowsRequested, joined(handlers.maintenance)),),
            description="Maintenance windows operators set per pool and site",
        ),
    )
