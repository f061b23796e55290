"""The updater service's subscriptions: its whole topology at a glance.

Consumes ``rollout.planned.*`` (the approved plan's nodes), ``wave.planned.*`` (work items),
``rollout.halted.*`` and ``gate.tripped.*`` (stop new mutating work), ``bundle.attested``
(the images), ``drift.detected|resolved.*.*`` (the GSP runbook) and ``maintenance.changed``
(the windows no node's work starts outside); emits ``device.*``
and ``wave.completed`` from its worker through the outbox, ``rollout.halted`` when it refuses a
wave, and asks the inventory ``fleet.query``.
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
    DriftDetected,
    DriftResolved,
    FleetChanged,
    FleetQueryRequested,
    GateTripped,
    MaintenanceWindowsChanged,
    NodeCommandRequested,
    RolloutHalted,
    RolloutPlanned,
    WaveCompleted,
    WavePlanned,
)
from lockstep_updater.adapters.repository import joined
from lockstep_updater.handlers import Handlers

# The event classes this service publishes: with ``subscriptions()``, the source of the
# producer and consumer lists in docs/ and of the NATS permission matrix (fleet.query is a
# request it sends, and so is node.command to one node's agent).
EMITS: tuple[type[EventData], ...] = (
    DeviceStaged,
    DeviceActivated,
    DeviceVerified,
    DeviceFailed,
    DeviceRolledBack,
    WaveCompleted,
    RolloutHalted,
    FleetQueryRequested,
    NodeCommandRequested,
)

# Core NATS subjects every updater process hears as they are published, outside any stream:
# registry changes, which drop the process's copy of a node (``adapters.wave_facts``).
HEARS: tuple[type[EventData], ...] = (FleetChanged,)


def subscriptions(handlers: Handlers) -> tuple[Subscription, ...]:
    """Subject -> handler bindings of this service (``handlers`` carry the GSP runbook's
    policy)."""
    return (
        Subscription(
            name="updater-rollouts",
            stream="ROLLOUTS",
            # Patterns over every rollout id (subjects.py builds concrete subjects only).
            subjects=("rollout.planned.*", "wave.planned.*", "rollout.halted.*"),
            handlers=(
                On(RolloutPlanned, joined(handlers.rollout_planned)),
                On(WavePlanned, joined(handlers.wave_planned)),
                On(RolloutHalted, joined(handlers.rollout_halted)),
            ),
            description="Approved plans, released waves and halts",
        ),
        Subscription(
            name="updater-gates",
            stream="GATES",
            subjects=("gate.tripped.*",),
            handlers=(On(GateTripped, joined(handlers.gate_tripped)),),
            description="A tripped gate stops new mutating work at once",
        ),
        Subscription(
            name="updater-bundles",
            stream="BUNDLES",
            subjects=(subjects.bundle_attested(),),
            handlers=(On(BundleAttested, joined(handlers.bundle_attested)),),
            description="Attested images to push",
        ),
        Subscription(
            name="updater-drift",
            stream="DRIFT",
            subjects=("drift.detected.*.*", "drift.resolved.*.*"),
            handlers=(
                On(DriftDetected, joined(handlers.drift_detected)),
                On(DriftResolved, joined(handlers.drift_resolved)),
            ),
            description="A GSP / driver mismatch starts the runbook (seed 004); a resolved "
            "drift withdraws a remedy still waiting for approval",
        ),
        Subscription(
            name="updater-maintenance",
            stream="MAINTENANCE",
            subjects=(subjects.maintenance_changed(),),
            handlers=(On(MaintenanceWindowsChanged, joined(handlers.maintenance_changed)),),
            description="Maintenance windows per pool and site: no node's work starts outside",
        ),
    )
