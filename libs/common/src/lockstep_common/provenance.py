"""Who may say what: the producers of each event, and the subject each payload belongs on.

The NATS permission matrix (``bus_access``, docs/bus-access.md) grants each event subject to
the identities that produce it and to nobody else, so a message stored on a subject was
published by one of them: the subject is the one thing in a message that the server checked.
Everything else is what the sender wrote: the envelope's ``source``, the node a payload names,
NATS headers. The consumer runtime therefore accepts an event only when

1. its payload belongs on the subject it arrived on (:func:`subject_of`): a health report
   naming node B that arrived on node A's subject is A speaking for B, and a ``gate.tripped``
   whose payload names another rollout than its subject trips the wrong one;
2. its ``source`` names an identity the catalogue (:data:`PRODUCERS`) allows to publish it:
   the server saw one of them publish it, so an envelope that names someone else lies about
   who sent it, and nothing downstream may act on, log or audit that claim.

Together they make the subject the proof of the producer: with one NATS identity per node
agent (its grants are its own subjects), a node's reports can come from that node alone. A
signed envelope would prove the same at the cost of a key per producer and a verification per
message; the server's check is already paid for. :data:`PRODUCERS` repeats what the services'
routers (``EMITS``) and ``schemadocs.CHANNELS`` declare, in identities; a unit test holds the
two equal, so neither can change alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from lockstep_common import subjects
from lockstep_common.envelope import Envelope, EventData, source_of
from lockstep_common.errors import InvalidMessage
from lockstep_common.events import v1
from lockstep_common.identities import ADMIN, AGENT, CLI, agent_identity
from lockstep_common.vocabulary import DeviceOutcome

# Services' identities are their names (``lockstep_common.identities``).
ATTEST, HEALTHGATE, INVENTORY, PLANNER, UPDATER = (
    "attest",
    "healthgate",
    "inventory",
    "planner",
    "updater",
)

# Each event class -> the identities granted its subject (request/reply answers excepted: they go
# to the asker's inbox). A class consumed by the runtime but missing here is refused.
PRODUCERS: Mapping[type[EventData], tuple[str, ...]] = {
    v1.BundleSubmitted: (CLI,),
    v1.BundleAttested: (ATTEST,),
    v1.BundleRejected: (ATTEST,),
    v1.IntentSubmitted: (ADMIN,),
    v1.RolloutPlanned: (PLANNER,),
    v1.RolloutHalted: (PLANNER, UPDATER),
    v1.RolloutCompleted: (PLANNER,),
    v1.WavePlanned: (PLANNER,),
    v1.WaveCompleted: (UPDATER,),
    v1.PinChanged: (CLI, PLANNER),
    v1.DeviceStaged: (UPDATER,),
    v1.DeviceActivated: (UPDATER,),
    v1.DeviceVerified: (UPDATER,),
    v1.DeviceFailed: (UPDATER,),
    v1.DeviceRolledBack: (UPDATER,),
    v1.GatePassed: (HEALTHGATE,),
    v1.GateTripped: (HEALTHGATE,),
    v1.GateInconclusive: (HEALTHGATE,),
    # Node agents only: the inventory's Redfish sweep applies its reports itself, never via
    # the bus, so a report on the bus that says it came from a BMC is refused (inventory).
    v1.InventoryObserved: (AGENT,),
    v1.HealthObserved: (AGENT,),
    v1.DriftDetected: (INVENTORY,),
    v1.DriftResolved: (INVENTORY,),
    v1.StragglersFlagged: (HEALTHGATE,),
    v1.AdmissionCheckRequested: (CLI,),
    v1.FleetQueryRequested: (CLI, HEALTHGATE, PLANNER, UPDATER),
    v1.FleetChanged: (INVENTORY,),
    v1.NodeCommandRequested: (UPDATER,),
    v1.MaintenanceWindowsRequested: (CLI,),
    v1.MaintenanceWindowsChanged: (PLANNER,),
}


def _device(outcome: DeviceOutcome) -> Callable[[Any], str]:
    return lambda d: subjects.device(outcome, d.rollout_id, d.node_id)


# Each event class -> the logical subject its payload belongs on, built by the same
# ``subjects`` builders the producers publish with.
_SUBJECT_OF: Mapping[type[EventData], Callable[[Any], str]] = {
    v1.BundleSubmitted: lambda _: subjects.bundle_submitted(),
    v1.BundleAttested: lambda _: subjects.bundle_attested(),
    v1.BundleRejected: lambda _: subjects.bundle_rejected(),
    v1.IntentSubmitted: lambda _: subjects.intent_submitted(),
    v1.RolloutPlanned: lambda d: subjects.rollout_planned(d.rollout_id),
    v1.RolloutHalted: lambda d: subjects.rollout_halted(d.rollout_id),
    v1.RolloutCompleted: lambda d: subjects.rollout_completed(d.rollout_id),
    v1.WavePlanned: lambda d: subjects.wave_planned(d.rollout_id),
    v1.WaveCompleted: lambda d: subjects.wave_completed(d.rollout_id),
    v1.PinChanged: lambda d: subjects.pin_changed(d.site),
    v1.DeviceStaged: _device(DeviceOutcome.STAGED),
    v1.DeviceActivated: _device(DeviceOutcome.ACTIVATED),
    v1.DeviceVerified: _device(DeviceOutcome.VERIFIED),
    v1.DeviceFailed: _device(DeviceOutcome.FAILED),
    v1.DeviceRolledBack: _device(DeviceOutcome.ROLLED_BACK),
    # The verdict the payload states, not the class's: a GatePassed saying "tripped" fits no
    # gate subject and is refused.
    v1.GatePassed: lambda d: subjects.gate(d.verdict, d.rollout_id),
    v1.GateTripped: lambda d: subjects.gate(d.verdict, d.rollout_id),
    v1.GateInconclusive: lambda d: subjects.gate(d.verdict, d.rollout_id),
    v1.InventoryObserved: lambda d: subjects.inventory_observed(d.site, d.node_id),
    v1.HealthObserved: lambda d: subjects.health_observed(d.site, d.node_id),
    v1.DriftDetected: lambda d: subjects.drift_detected(d.site, d.node_id),
    v1.DriftResolved: lambda d: subjects.drift_resolved(d.site, d.node_id),
    v1.StragglersFlagged: lambda d: subjects.drift_stragglers(d.profile),
    v1.AdmissionCheckRequested: lambda _: subjects.admission_check(),
    v1.FleetQueryRequested: lambda _: subjects.fleet_query(),
    v1.FleetChanged: lambda _: subjects.fleet_changed(),
    v1.NodeCommandRequested: lambda d: subjects.node_command(d.site, d.node_id),
    v1.MaintenanceWindowsRequested: lambda _: subjects.maintenance_requested(),
    v1.MaintenanceWindowsChanged: lambda _: subjects.maintenance_changed(),
}


def subject_of(data: EventData) -> str:
    """The logical subject ``data`` belongs on.

    Raises:
        InvalidMessage: no subject is declared for its class.
    """
    build = _SUBJECT_OF.get(type(data))
    if build is None:
        raise InvalidMessage(f"no subject is declared for {data.cloudevents_type()}")
    return build(data)


def speaks_as(identity: str, source: str) -> bool:
    """True when the CloudEvents ``source`` names ``identity``: ``/lockstep/<identity>``, or a
    path below it (a replica ``/lockstep/updater/2``); a node's agent is
    ``/lockstep/agent-<node>``."""
    own = source_of(identity)
    return source == own or source.startswith(own + "/")


def _identity_for(identity: str, data: EventData) -> str:
    """``identity`` as it publishes ``data``: the node agents' template (``AGENT``) is the
    identity of the one node the payload names, ``agent-<node>`` (its grants are that node's
    subjects only, ``bus_access.node_agent``); a service or operator identity is itself."""
    if identity == AGENT and isinstance(data, v1.InventoryObserved | v1.HealthObserved):
        return agent_identity(data.node_id)
    return identity


def source_for(data: EventData | type[EventData]) -> str:
    """The ``source`` a stand-in for ``data``'s first producer sends with (benchmarks, tests):
    a node's report as that node's agent, which only an event (not its class) names."""
    cls = data if isinstance(data, type) else type(data)
    identity = PRODUCERS[cls][0]
    if isinstance(data, type):
        if identity == AGENT:
            raise ValueError(f"{cls.__name__} is sent by one node's agent: give the event")
        return source_of(identity)
    return source_of(_identity_for(identity, data))


def check(env: Envelope[EventData], subject: str) -> None:
    """Refuse ``env``, which arrived on the logical ``subject``, unless its payload belongs on
    that subject and its ``source`` names an identity allowed to publish it.

    Raises:
        InvalidMessage: naming what does not match (the consumer dead-letters it).
    """
    data = env.data
    expected = subject_of(data)
    if subject != expected:
        raise InvalidMessage(
            f"{env.type} arrived on {subject} but its payload belongs on {expected}: "
            "a producer may speak only for what its own subject names"
        )
    producers = [_identity_for(p, data) for p in PRODUCERS.get(type(data), ())]
    if not any(speaks_as(identity, env.source) for identity in producers):
        allowed = ", ".join(source_of(p) for p in producers) or "nobody"
        raise InvalidMessage(
            f"{env.type} on {subject} says it comes from {env.source!r}, but only "
            f"{allowed} may publish it"
        )
