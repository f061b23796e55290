"""The healthgate service's subscriptions: its whole topology at a glance.

Consumes health reports (``telemetry.observed.health.>``, in batches), wave boundaries
(``wave.>``, ``rollout.halted|completed.*``) and failed device steps (``device.>``); emits
``gate.passed`` / ``gate.tripped`` / ``gate.inconclusive`` through the outbox, from the handlers
(a hard rule, at once) and from the evaluation worker (the judge, after the soak).
"""

from __future__ import annotations

from lockstep_common import subjects
from lockstep_common.consumer import On, OnBatch, Subscription
from lockstep_common.envelope import EventData
from lockstep_common.events.v1 import (
    DeviceActivated,
    DeviceFailed,
    DeviceRolledBack,
    DeviceStaged,
    DeviceVerified,
    FleetQueryRequested,
    GateInconclusive,
    GatePassed,
    GateTripped,
    HealthObserved,
    RolloutCompleted,
    RolloutHalted,
    StragglersFlagged,
    WaveCompleted,
    WavePlanned,
)
from lockstep_healthgate.adapters.pg_store import joined
from lockstep_healthgate.handlers import Handlers

# The event classes this service publishes: with ``subscriptions()``, the source of the
# producer and consumer lists in docs/.
EMITS: tuple[type[EventData], ...] = (
    GatePassed,
    GateTripped,
    GateInconclusive,
    StragglersFlagged,
    FleetQueryRequested,
)


def subscriptions(handlers: Handlers) -> tuple[Subscription, ...]:
    """Subject -> handler bindings of this service."""
    return (
        Subscription(
            name="healthgate-health",
            stream="TELEMETRY",
            subjects=(subjects.health_observed_all(),),
            batch=OnBatch(HealthObserved, joined.batch(handlers.health_observed)),
            description="Health reports from node agents: stored, and hard rules checked",
        ),
        Subscription(
            name="healthgate-waves",
            stream="ROLLOUTS",
            subjects=(subjects.waves_all(), *subjects.rollout_ends()),
            handlers=(
                On(WavePlanned, joined(handlers.wave_planned)),
                On(WaveCompleted, joined(handlers.wave_completed)),
                On(RolloutHalted, joined(handlers.rollout_ended)),
                On(RolloutCompleted, joined(handlers.rollout_ended)),
            ),
            description="Waves to gate: canary and control, soak start, rollout end",
        ),
        Subscription(
            name="healthgate-devices",
            stream="DEVICES",
            subjects=(subjects.devices_all(),),
            handlers=(On(DeviceFailed, joined(handlers.device_failed)),),
            # Only a failure is evidence against the image; the other steps are progress.
            ignores=(DeviceStaged, DeviceActivated, DeviceVerified, DeviceRolledBack),
            description="A bricked or unreadable device trips the gate at once",
        ),
    )
