"""What each service consumes and produces, read from the services' own routers: the consumer
and producer lists of the generated docs (``lockstep docs``), so that they cannot disagree with
the code.

The CLI is the one place that may import every service; ``lockstep_common.schemadocs`` takes
the result as data.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from lockstep_attest import operator_commands as attest_operator_commands
from lockstep_attest import router as attest_router
from lockstep_attest.adapters.bundle_source import BundleSource
from lockstep_attest.domain import jobs as attest_jobs
from lockstep_attest.handlers import Handlers as AttestHandlers
from lockstep_common.advisories import watcher_durable
from lockstep_common.asyncapi import NODE, SITE
from lockstep_common.asyncapi import namespace as documented_namespace
from lockstep_common.bus_access import (
    OPERATORS,
    SENDER_IDENTITIES,
    Durable,
    Party,
    Permissions,
    matrix,
)
from lockstep_common.compatibility.files import packaged_rules
from lockstep_common.consumer import Subscription
from lockstep_common.dlq_commands import DLQ_COMMANDS
from lockstep_common.envelope import EventData
from lockstep_common.events.v1 import OpsRefused
from lockstep_common.identities import ADMIN, AGENT, NODE_PLACEHOLDER, READER, SITE_PLACEHOLDER
from lockstep_common.operator import Command
from lockstep_common.schemadocs import CHANNELS, Parties, pattern
from lockstep_common.statediagram import Machine
from lockstep_common.subjects import Namespace, ops_requests_of
from lockstep_common.topology import EVENT_STREAMS, advisory_stream, stream_for
from lockstep_gate.policy_files import default_policy
from lockstep_healthgate import operator_commands as healthgate_operator_commands
from lockstep_healthgate import router as healthgate_router
from lockstep_healthgate.domain import waves as gated_waves
from lockstep_healthgate.handlers import Handlers as GateHandlers
from lockstep_healthgate.verdicts import GateConfig
from lockstep_inventory import router as inventory_router
from lockstep_inventory.handlers import Handlers as InventoryHandlers
from lockstep_planner import operator_commands as planner_operator_commands
from lockstep_planner import router as planner_router
from lockstep_planner.domain import fabric, rollout
from lockstep_planner.handlers import Handlers as PlannerHandlers
from lockstep_planner.lifecycle import Timing
from lockstep_updater import operator_commands as updater_operator_commands
from lockstep_updater import router as updater_router
from lockstep_updater.domain import step_notes
from lockstep_updater.domain import steps as node_steps
from lockstep_updater.domain.remedy import RemedyPolicy
from lockstep_updater.handlers import Handlers as UpdaterHandlers


async def _documented_only() -> None:
    """Stands for the planner worker's pass: the commands are listed here, never run."""


# The operator commands a service adds in its app.py (add_operator_commands), where its
# router does not list them (the inventory's router does: ANSWERS, EMITS).
OPERATOR_COMMANDS: dict[str, tuple[Command[Any], ...]] = {
    "attest": attest_operator_commands.commands(BundleSource.of([], 0)),
    "healthgate": healthgate_operator_commands.COMMANDS,
    "planner": planner_operator_commands.all_commands(_documented_only),
    "updater": updater_operator_commands.COMMANDS,
}


def subscriptions_by_service() -> dict[str, tuple[Subscription, ...]]:
    """Every service's subscriptions, as its ``app.py`` binds them."""
    return {
        "attest": attest_router.subscriptions(AttestHandlers()),
        "healthgate": healthgate_router.subscriptions(GateHandlers(GateConfig(default_policy()))),
        "inventory": inventory_router.subscriptions(InventoryHandlers(packaged_rules())),
        "planner": planner_router.subscriptions(PlannerHandlers(Timing())),
        "updater": updater_router.subscriptions(UpdaterHandlers(RemedyPolicy.AUTOMATIC)),
    }


def _emits() -> dict[str, tuple[type[EventData], ...]]:
    """The event classes each service publishes (``router.EMITS``), and the replies to the
    operator commands every service answers (``ServiceApp``: its dead letters)."""
    common: tuple[type[EventData], ...] = (OpsRefused, *(c.answer for c in DLQ_COMMANDS))
    own = {s: tuple(c.answer for c in commands) for s, commands in OPERATOR_COMMANDS.items()}
    return {
        "attest": (*attest_router.EMITS, *own["attest"], *common),
        "healthgate": (*healthgate_router.EMITS, *own["healthgate"], *common),
        "inventory": (*inventory_router.EMITS, *common),
        "planner": (*planner_router.EMITS, *own["planner"], *common),
        "updater": (*updater_router.EMITS, *own["updater"], *common),
    }


def producers() -> dict[type[EventData], tuple[str, ...]]:
    """Event class -> the services that publish it."""
    found: defaultdict[type[EventData], set[str]] = defaultdict(set)
    for service, classes in _emits().items():
        for cls in classes:
            found[cls].add(service)
    return {cls: tuple(sorted(names)) for cls, names in found.items()}


def _answers() -> dict[str, tuple[type[EventData], ...]]:
    """Request/reply subjects each service answers (core NATS, not subscriptions): its own,
    and the operator commands about its dead letters (``ServiceApp``)."""
    common = tuple(c.request for c in DLQ_COMMANDS)
    own = {s: tuple(c.request for c in commands) for s, commands in OPERATOR_COMMANDS.items()}
    own["inventory"] = inventory_router.ANSWERS  # its operator commands' requests included
    return {service: (*own.get(service, ()), *common) for service in subscriptions_by_service()}


def _hears() -> dict[str, tuple[type[EventData], ...]]:
    """Core NATS subjects a service hears as they are published (``router.HEARS``): every one
    of its processes gets each message, where a durable would hand it to one of them."""
    return {"updater": updater_router.HEARS}


def consumers() -> dict[type[EventData], tuple[str, ...]]:
    """Event class -> the services that take it off a stream and act on it, or answer it.

    A class a subscription only ``ignores`` is not consumed by it.
    """
    found: defaultdict[type[EventData], set[str]] = defaultdict(set)

    def add(service: str, classes: Iterable[type[EventData]]) -> None:
        for cls in classes:
            found[cls].add(service)

    for service, subs in subscriptions_by_service().items():
        for sub in subs:
            add(service, sub.handled)
    for service, classes in (*_answers().items(), *_hears().items()):
        add(service, classes)
    return {cls: tuple(sorted(names)) for cls, names in found.items()}


def machines() -> tuple[Machine[Any], ...]:
    """The persisted state machines whose diagrams ``docs generate`` draws into the docs."""
    return (
        Machine(
            "node step",
            "updater.md",
            "lockstep_updater.domain.steps.ALLOWED",
            node_steps.ALLOWED,
            node_steps.INITIAL,
            step_notes.ENTRY,
            step_notes.LABELS,
        ),
        Machine(
            "attest job",
            "bundles.md",
            "lockstep_attest.domain.jobs.ALLOWED",
            attest_jobs.ALLOWED,
            attest_jobs.INITIAL,
            attest_jobs.ENTRY,
            attest_jobs.LABELS,
        ),
        Machine(
            "rollout",
            "rollouts.md",
            "lockstep_planner.domain.rollout.ROLLOUT_ALLOWED",
            rollout.ROLLOUT_ALLOWED,
            rollout.RolloutState.PLANNED,
            "intent planned (plan committed)",
            rollout.ROLLOUT_LABELS,
        ),
        Machine(
            "wave",
            "rollouts.md",
            "lockstep_planner.domain.rollout.WAVE_ALLOWED",
            rollout.WAVE_ALLOWED,
            rollout.WaveState.PENDING,
            "rollout planned",
            rollout.WAVE_LABELS,
        ),
        Machine(
            "fabric domain",
            "rollouts.md",
            "lockstep_planner.domain.fabric.ALLOWED",
            fabric.ALLOWED,
            fabric.Lifecycle.AVAILABLE,
            "learned from the fleet",
        ),
        Machine(
            "gated wave",
            "healthgate.md",
            "lockstep_healthgate.domain.waves.ALLOWED",
            gated_waves.ALLOWED,
            gated_waves.INITIAL,
            gated_waves.ENTRY,
            gated_waves.LABELS,
        ),
    )


def parties() -> Parties:
    """Who produces and consumes each event class, for ``schemadocs``."""
    return Parties(
        producers=producers(),
        consumers=consumers(),
        access=bus_permissions(documented_namespace()),
        machines=machines(),
    )


def stream_names(namespace: Namespace) -> tuple[str, ...]:
    """Every stream of the namespace, the advisories' included."""
    return (
        *(namespace.stream(s.base) for s in EVENT_STREAMS),
        namespace.stream(advisory_stream(namespace).base),
    )


def bus_parties(namespace: Namespace) -> dict[str, Party]:
    """What each identity does on the bus: every service from its router, the CLI and node
    agents from ``schemadocs.CHANNELS``' outside senders."""
    advisories = advisory_stream(namespace).base
    streams = stream_names(namespace)
    emits, answers, hears = _emits(), _answers(), _hears()
    out: dict[str, Party] = {}
    for service, subs in subscriptions_by_service().items():
        durables = [Durable(namespace.stream(s.stream), namespace.durable(s.name)) for s in subs]
        if subs:
            watcher = watcher_durable(service)
            durables.append(Durable(namespace.stream(advisories), namespace.durable(watcher)))
        out[service] = Party(
            # A reply goes to the asker's inbox under allow_responses, never to the subject.
            sends=tuple(pattern(cls) for cls in emits[service] if not CHANNELS[cls].reply),
            consumes=tuple(durables),
            dead_letters=tuple(subject for sub in subs for subject in sub.subjects),
            answers=tuple(pattern(cls, service) for cls in answers.get(service, ())),
            streams=streams,
            hears=tuple(pattern(cls) for cls in hears.get(service, ())),
        )
    outside: defaultdict[str, set[str]] = defaultdict(set)
    answering: defaultdict[str, set[str]] = defaultdict(set)
    heard: set[str] = set()
    for cls, channel in CHANNELS.items():
        if channel.reply:
            continue
        for answerer in channel.answerers:
            for identity in SENDER_IDENTITIES[answerer]:
                own = identity == AGENT  # a node's agent answers for its own node only
                answering[identity].add(node_own_subject(cls) if own else pattern(cls))
        for sender in channel.senders:
            for identity in SENDER_IDENTITIES[sender]:
                own = identity == AGENT  # a node's agent sends for its own node only
                outside[identity].add(node_own_subject(cls) if own else pattern(cls))
        if channel.readers:
            heard.add(pattern(cls))
    for identity in OPERATORS:
        outside[identity].add(ops_requests_of(identity))
    reader_sends = outside.pop(READER, set())
    outside.pop(ADMIN, None)  # admin's grants are bus_access.admin_permissions, all of them
    for identity, sends in outside.items():
        out[identity] = Party(
            sends=tuple(sorted(sends)), answers=tuple(sorted(answering.pop(identity, set())))
        )
    for identity, answered in answering.items():
        out[identity] = Party(answers=tuple(sorted(answered)))
    out[READER] = Party(
        sends=tuple(sorted(reader_sends)),
        hears=tuple(sorted(heard)),
        reads=tuple(sorted({stream_for(namespace, subject) for subject in heard})),
    )
    return out


def node_own_subject(cls: type[EventData]) -> str:
    """The subject of ``cls`` as one node's agent may publish it: the node's site and id as
    place-holders (``bus_access.node_agent`` fills them in), no wildcard."""
    stand_ins = {SITE: SITE_PLACEHOLDER, NODE: NODE_PLACEHOLDER}
    subject = CHANNELS[cls].subject()
    out = ".".join(stand_ins.get(t, t) for t in subject.split("."))
    if "PARAM-" in out:  # a parameter a node cannot fill with its own site or id
        raise ValueError(f"{cls.__name__}: node agents cannot send {subject!r}")
    return out


def bus_permissions(namespace: Namespace) -> dict[str, Permissions]:
    """The NATS permission matrix of a deployment (``bus_access``)."""
    return matrix(namespace, bus_parties(namespace))
