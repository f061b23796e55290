"""The documents in ``docs/`` that users read, generated from the event models.

``render(parties)`` produces, deterministically, a JSON Schema per event
(``schemas/<type>.v<N>.json``, the whole CloudEvent with wire attribute names), the AsyncAPI 3.0
document (``asyncapi.yaml``) and the event table (``events.md``). Which services produce and
consume an event is not typed here: the caller passes what the services' own routers declare
(``EMITS`` and ``subscriptions()``, collected by ``lockstep_cli.catalog``), so the documents
cannot disagree with the code. The state diagrams in hand-written pages (``updater.md``,
``bundles.md``, ``rollouts.md``, ``healthgate.md``) are drawn the same way, from the transition
tables the caller passes (``Parties.machines``, see ``statediagram``). ``lockstep docs
generate`` writes them; ``lockstep docs check`` and the unit tests fail when the committed files
differ from what the models and routers generate.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

import yaml

from lockstep_common import subjects
from lockstep_common.asyncapi import (
    COMMAND,
    IDENTITY,
    NODE,
    PROFILE,
    ROLLOUT,
    SERVICE,
    SITE,
    Route,
    address,
    docstring,
    document,
    envelope_schema,
    message_key,
)
from lockstep_common.bus_access import Permissions, access_markdown
from lockstep_common.envelope import EventData
from lockstep_common.events import REGISTRY, v1
from lockstep_common.samples import samples
from lockstep_common.statediagram import Machine, MissingMarkers, splice
from lockstep_common.vocabulary import DeviceOutcome, GateVerdict

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
SCHEMAS_DIR = "schemas"

ByClass = Mapping[type[EventData], Sequence[str]]


@dataclass(frozen=True, slots=True)
class Parties:
    """Which Lockstep services produce and consume each event class, from their routers."""

    producers: ByClass
    consumers: ByClass
    access: Mapping[str, Permissions] = field(default_factory=dict)
    machines: Sequence[Machine[Any]] = ()
    """The state machines whose diagrams go into hand-written pages (``statediagram``)."""


@dataclass(frozen=True, slots=True)
class Channel:
    """Where one event class travels, as far as the services' code cannot say it: the subject
    builder (called with stand-in tokens), who sends it from outside Lockstep's services (the
    CLI, node agents, schedulers), and who reads it outside them (people, audit, schedulers).
    ``reply`` marks a request/reply answer; ``answerers``, outside senders that answer the
    request (a node's agent answers its own node's commands only)."""

    subject: Callable[[], str]
    senders: tuple[str, ...] = ()
    readers: tuple[str, ...] = ()
    reply: bool = False
    answerers: tuple[str, ...] = ()


_ROLLOUT_READERS = ("sre", "audit")
_GATE_READERS = ("sre",)
_DRIFT_READERS = ("platform-teams",)


# The one table of where each event travels (design.md, "Events"). A class missing here stops
# generation.
def _ops(
    service: str, command: str, request: type[EventData], answer: type[EventData]
) -> dict[type[EventData], Channel]:
    """An operator command's request and answer: asked by an operator identity on its own
    ``ops.<identity>.<service>.<command>`` (granted per identity, ``bus_access``), answered to
    its inbox."""

    def subject() -> str:
        return subjects.ops_request(IDENTITY, service, command)

    return {
        request: Channel(subject, ("operators",)),
        answer: Channel(subject, readers=("operators",), reply=True),
    }


CHANNELS: dict[type[EventData], Channel] = {
    v1.BundleSubmitted: Channel(subjects.bundle_submitted, ("cli",)),
    v1.BundleAttested: Channel(subjects.bundle_attested, readers=("audit",)),
    v1.BundleRejected: Channel(subjects.bundle_rejected, readers=("audit",)),
    # The cli no longer sends it (issue 26): `lockstep rollout start` asks the planner
    # (`rollout.start`), which records the intent itself. `admin` may (it publishes anything of
    # the namespace): an intent republished by hand, or by a bench or test on its own server.
    v1.IntentSubmitted: Channel(subjects.intent_submitted, ("admin",)),
    v1.RolloutPlanned: Channel(lambda: subjects.rollout_planned(ROLLOUT), readers=_ROLLOUT_READERS),
    v1.RolloutHalted: Channel(lambda: subjects.rollout_halted(ROLLOUT), readers=_ROLLOUT_READERS),
    v1.RolloutCompleted: Channel(
        lambda: subjects.rollout_completed(ROLLOUT), readers=_ROLLOUT_READERS
    ),
    v1.WavePlanned: Channel(lambda: subjects.wave_planned(ROLLOUT)),
    v1.WaveCompleted: Channel(lambda: subjects.wave_completed(ROLLOUT)),
    # The planner publishes the pins of rollouts; `lockstep fleet pin` sets pins by hand.
    v1.PinChanged: Channel(lambda: subjects.pin_changed(SITE), ("cli",)),
    # `lockstep pool set` asks; the planner records, audits and announces what it holds.
    v1.MaintenanceWindowsRequested: Channel(subjects.maintenance_requested, ("cli",)),
    v1.MaintenanceWindowsChanged: Channel(subjects.maintenance_changed, readers=("sre",)),
    v1.DeviceStaged: Channel(lambda: subjects.device(DeviceOutcome.STAGED, ROLLOUT, NODE)),
    v1.DeviceActivated: Channel(lambda: subjects.device(DeviceOutcome.ACTIVATED, ROLLOUT, NODE)),
    v1.DeviceVerified: Channel(lambda: subjects.device(DeviceOutcome.VERIFIED, ROLLOUT, NODE)),
    v1.DeviceFailed: Channel(
        lambda: subjects.device(DeviceOutcome.FAILED, ROLLOUT, NODE), readers=("sre",)
    ),
    v1.DeviceRolledBack: Channel(
        lambda: subjects.device(DeviceOutcome.ROLLED_BACK, ROLLOUT, NODE), readers=("sre",)
    ),
    v1.GatePassed: Channel(
        lambda: subjects.gate(GateVerdict.PASSED, ROLLOUT), readers=_GATE_READERS
    ),
    v1.GateTripped: Channel(
        lambda: subjects.gate(GateVerdict.TRIPPED, ROLLOUT), readers=_GATE_READERS
    ),
    v1.GateInconclusive: Channel(
        lambda: subjects.gate(GateVerdict.INCONCLUSIVE, ROLLOUT), readers=_GATE_READERS
    ),
    v1.InventoryObserved: Channel(
        lambda: subjects.inventory_observed(SITE, NODE), ("bmc-sweeper", "node-agent")
    ),
    v1.HealthObserved: Channel(lambda: subjects.health_observed(SITE, NODE), ("node-agent",)),
    v1.DriftDetected: Channel(lambda: subjects.drift_detected(SITE, NODE), readers=_DRIFT_READERS),
    v1.DriftResolved: Channel(lambda: subjects.drift_resolved(SITE, NODE), readers=_DRIFT_READERS),
    v1.StragglersFlagged: Channel(
        lambda: subjects.drift_stragglers(PROFILE), readers=_DRIFT_READERS
    ),
    v1.AdmissionCheckRequested: Channel(subjects.admission_check, ("schedulers",)),
    v1.AdmissionCheckAnswered: Channel(
        subjects.admission_check, readers=("schedulers",), reply=True
    ),
    # The CLI asks for the sites of the nodes `lockstep agent enroll` is given.
    v1.FleetQueryRequested: Channel(subjects.fleet_query, ("cli",)),
    v1.FleetQueryAnswered: Channel(subjects.fleet_query, reply=True),
    # Heard by every updater process as it is published (core NATS: no stream, no durable).
    v1.FleetChanged: Channel(subjects.fleet_changed),
    # The updater's in-band steps ask one node's agent; only that node's agent answers.
    v1.NodeCommandRequested: Channel(
        lambda: subjects.node_command(SITE, NODE), answerers=("node-agent",)
    ),
    v1.NodeCommandAnswered: Channel(
        lambda: subjects.node_command(SITE, NODE), ("node-agent",), reply=True
    ),
    v1.OpsRefused: Channel(lambda: subjects.ops_request(IDENTITY, SERVICE, COMMAND), reply=True),
    **_ops("inventory", "fleet.list", v1.FleetListRequested, v1.FleetListAnswered),
    **_ops("inventory", "fleet.status", v1.FleetStatusRequested, v1.FleetStatusAnswered),
    **_ops("inventory", "fleet.show", v1.FleetShowRequested, v1.FleetShowAnswered),
    **_ops("inventory", "fleet.drift", v1.FleetDriftRequested, v1.FleetDriftAnswered),
    **_ops("inventory", "fleet.remove", v1.FleetRemoveRequested, v1.FleetRemoveAnswered),
    **_ops("inventory", "fleet.golden", v1.FleetGoldenRequested, v1.FleetGoldenAnswered),
    **_ops("inventory", "fleet.import", v1.FleetImportRequested, v1.FleetImportAnswered),
    **_ops("inventory", "fleet.sweep", v1.FleetSweepRequested, v1.FleetSweepAnswered),
    **_ops("inventory", "fleet.swept", v1.FleetSweptRequested, v1.FleetSweptAnswered),
    **_ops("attest", "bundle.submit", v1.BundleSubmitRequested, v1.BundleSubmitAnswered),
    **_ops("attest", "bundle.list", v1.BundleListRequested, v1.BundleListAnswered),
    **_ops("attest", "bundle.show", v1.BundleShowRequested, v1.BundleShowAnswered),
    **_ops("updater", "node.history", v1.NodeHistoryRequested, v1.NodeHistoryAnswered),
    **_ops("updater", "node.release", v1.NodeReleaseRequested, v1.NodeReleaseAnswered),
    **_ops("updater", "node.quarantined", v1.NodeQuarantinedRequested, v1.NodeQuarantinedAnswered),
    **_ops(
        "updater",
        "node.approve-remedy",
        v1.NodeApproveRemedyRequested,
        v1.NodeApproveRemedyAnswered,
    ),
    **_ops("healthgate", "gate.show", v1.GateShowRequested, v1.GateShowAnswered),
    **_ops(
        "healthgate", "fleet.stragglers", v1.FleetStragglersRequested, v1.FleetStragglersAnswered
    ),
    **_ops("planner", "rollout.status", v1.RolloutStatusRequested, v1.RolloutStatusAnswered),
    **_ops("planner", "rollout.audit", v1.RolloutAuditRequested, v1.RolloutAuditAnswered),
    **_ops("planner", "rollout.control", v1.RolloutControlRequested, v1.RolloutControlAnswered),
    **_ops("planner", "fabric.pin", v1.FabricPinRequested, v1.FabricPinAnswered),
    **_ops("planner", "rollout.plan", v1.RolloutPlanRequested, v1.RolloutPlanAnswered),
    **_ops("planner", "rollout.start", v1.RolloutStartRequested, v1.RolloutStartAnswered),
    **_ops("planner", "rollout.list", v1.RolloutListRequested, v1.RolloutListAnswered),
    **_ops("planner", "fabric.list", v1.FabricListRequested, v1.FabricListAnswered),
    **_ops("planner", "pool.show", v1.PoolShowRequested, v1.PoolShowAnswered),
    **_ops("planner", "fabric.show", v1.FabricShowRequested, v1.FabricShowAnswered),
    # Every service answers these about its own dead letters (lockstep_common.dlq_commands).
    **_ops(SERVICE, "dlq.list", v1.DlqListRequested, v1.DlqListAnswered),
    **_ops(SERVICE, "dlq.show", v1.DlqShowRequested, v1.DlqShowAnswered),
    **_ops(SERVICE, "dlq.purge", v1.DlqPurgeRequested, v1.DlqPurgeAnswered),
}


def pattern(cls: type[EventData], service: str | None = None) -> str:
    """The logical subject pattern of ``cls``: its subject with ``*`` for every parameter
    (``drift.detected.*.*``), as a NATS permission or subscription spells it; the service
    token of an operator command every service answers is ``service``'s own."""
    stand_ins = {ROLLOUT, SITE, NODE, PROFILE, IDENTITY, SERVICE, COMMAND}
    return ".".join(
        service if t == SERVICE and service else "*" if t in stand_ins else t
        for t in CHANNELS[cls].subject().split(".")
    )


def routes(parties: Parties) -> dict[type[EventData], Route]:
    """Every registered event class with its route, in registry order: its channel, with the
    services that produce and consume it (sorted) before its outside senders and readers.

    Raises:
        ValueError: a registered class has no entry in ``CHANNELS``, or a produced or consumed
            class is not registered.
    """
    classes = REGISTRY.classes()
    missing = [cls.__name__ for cls in classes if cls not in CHANNELS]
    if missing:
        raise ValueError(f"no channel for {', '.join(missing)}: add it to schemadocs.CHANNELS")
    named = [*parties.producers, *parties.consumers]
    unknown = sorted({cls.__name__ for cls in named if cls not in CHANNELS})
    if unknown:
        raise ValueError(f"produced or consumed but not registered: {', '.join(unknown)}")
    out = {}
    for cls in classes:
        channel = CHANNELS[cls]
        producers = tuple(sorted(set(parties.producers.get(cls, ()))))
        consumers = tuple(sorted(set(parties.consumers.get(cls, ()))))
        out[cls] = Route(
            channel.subject,
            producers + channel.senders,
            consumers + channel.answerers + channel.readers,
            channel.reply,
        )
    return out


def schema_path(cls: type[EventData]) -> str:
    """Where an event's JSON Schema lives, relative to ``docs/``."""
    return f"{SCHEMAS_DIR}/{message_key(cls)}.json"


def json_schema(cls: type[EventData]) -> dict[str, Any]:
    """The standalone JSON Schema of a CloudEvent carrying ``cls``; ``$id`` is its dataschema."""
    return {"$schema": SCHEMA_DIALECT, "$id": cls.dataschema(), **envelope_schema(cls)}


def asyncapi_document(parties: Parties) -> dict[str, Any]:
    """The AsyncAPI 3.0 document, with one example per event from ``samples()``."""
    examples = {type(s): s for s in samples()}
    return document(routes(parties), examples, version("lockstep-common"))


def render(parties: Parties) -> dict[str, str]:
    """Every generated document: path relative to ``docs/`` -> text, sorted by path."""
    out = {schema_path(cls): _json(json_schema(cls)) for cls in REGISTRY.classes()}
    out["asyncapi.yaml"] = yaml.dump(
        asyncapi_document(parties), Dumper=_Dumper, sort_keys=True, allow_unicode=True, width=100
    )
    out["events.md"] = events_markdown(parties)
    if parties.access:
        out["bus-access.md"] = access_markdown(parties.access)
    return dict(sorted(out.items()))


def diagram_pages(docs_dir: Path, parties: Parties) -> dict[str, str]:
    """The hand-written pages that hold state diagrams, each with its diagrams redrawn from the
    tables (path relative to ``docs_dir`` -> text).

    Raises:
        statediagram.MissingMarkers: a page lacks the markers of a diagram it should hold.
    """
    out: dict[str, str] = {}
    for machine in parties.machines:
        page = out.get(machine.doc)
        if page is None:
            page = _read(docs_dir / machine.doc)
            if page is None:
                raise MissingMarkers(f"{machine.doc}: no such page for the {machine.name} diagram")
        out[machine.doc] = splice(page, machine)
    return out


def _wanted(docs_dir: Path, parties: Parties) -> dict[str, str]:
    return {**render(parties), **diagram_pages(docs_dir, parties)}


def stale(docs_dir: Path, parties: Parties) -> list[str]:
    """Paths under ``docs_dir`` that differ from ``render()``, are missing, or are obsolete;
    and hand-written pages whose generated diagrams differ from their tables.

    Obsolete means a schema file in ``schemas/`` that no registered class generates any more.
    """
    wanted = _wanted(docs_dir, parties)
    changed = [p for p, text in wanted.items() if _read(docs_dir / p) != text]
    return sorted(changed + _obsolete(docs_dir, wanted))


def write(docs_dir: Path, parties: Parties) -> list[str]:
    """Bring ``docs_dir`` up to date: write what differs, delete obsolete schema files.

    Returns:
        The paths (relative to ``docs_dir``) written or deleted, sorted.
    """
    wanted = _wanted(docs_dir, parties)
    changed = [p for p, text in wanted.items() if _read(docs_dir / p) != text]
    for rel in changed:
        path = docs_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(wanted[rel], encoding="utf-8", newline="\n")
    obsolete = _obsolete(docs_dir, wanted)
    for rel in obsolete:
        (docs_dir / rel).unlink()
    return sorted(changed + obsolete)


class _Dumper(yaml.SafeDumper):
    """SafeDumper that writes multi-line strings as literal blocks, so prose reads as written."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _represent_str)


def _json(obj: dict[str, Any]) -> str:
    return json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def _read(path: Path) -> str | None:
    # Bytes, not read_text: universal newlines would hide a file rewritten with CRLF.
    return path.read_bytes().decode("utf-8") if path.is_file() else None


def _obsolete(docs_dir: Path, wanted: dict[str, str]) -> list[str]:
    found = (docs_dir / SCHEMAS_DIR).glob("*.json")
    return sorted(
        f"{SCHEMAS_DIR}/{p.name}" for p in found if f"{SCHEMAS_DIR}/{p.name}" not in wanted
    )


def events_markdown(parties: Parties) -> str:
    """``events.md``: the event table, how to subscribe, and the versioning rules."""
    lines = [
        "# Events",
        "",
        "<!-- Generated by `lockstep docs generate` from the event models and the services' "
        "routers; do not edit. -->",
        "",
        "Every message is a CloudEvents 1.0 event in structured mode; the full contract is in "
        "[asyncapi.yaml](asyncapi.yaml) and each envelope's JSON Schema in "
        f"[{SCHEMAS_DIR}/]({SCHEMAS_DIR}/). Subjects show the default namespace `lockstep.`.",
        "",
        "| type | version | subject | producers | consumers | what it says |",
        "|---|---|---|---|---|---|",
    ]
    for cls, route in routes(parties).items():
        subject = f"reply to `{address(route)}`" if route.reply else f"`{address(route)}`"
        produced, consumed = ", ".join(route.producers), ", ".join(route.consumers)
        lines.append(
            f"| [`{cls.cloudevents_type()}`]({schema_path(cls)}) | {cls.schema_version} "
            f"| {subject} | {produced or '(none yet)'} | {consumed or '(none yet)'} "
            f"| {docstring(cls).splitlines()[0]} |"
        )
    return "\n".join(lines) + "\n" + _GUIDE


_GUIDE = """
A message no consumer could process is copied to `lockstep.dlq.<original subject>` (stream
`LOCKSTEP_DLQ`): the body is the original bytes, and the `Lockstep-Dlq-*` headers say why, how
often it was delivered, and where it came from (see `asyncapi.yaml`).

## Subscribing

To watch events live, subscribe to a subject pattern, e.g. `nats sub 'lockstep.drift.>'` for all
drift, or `nats sub 'lockstep.device.failed.*.*'` for failed device steps. A plain subscription
sees only what is published while it is connected. Anything that must not miss events should
read the JetStream stream through its own durable pull consumer with explicit acks and a finite
`max_deliver`, filtered on the subjects it needs (e.g. stream `LOCKSTEP_DRIFT`, filter
`lockstep.drift.detected.>`). Delivery is at least once: deduplicate on the CloudEvent `id`
(also the `Nats-Msg-Id` header). `admission.check` is core NATS request/reply and is not stored.

Bodies are plain CloudEvents JSON, so any CloudEvents SDK reads them (in Python,
`cloudevents.http.from_json(body)`). Dispatch on (`type`, `schemaversion`); to validate, use the
file in `schemas/` whose `$id` equals the event's `dataschema` (`urn:lockstep:schema:<type>:v<N>`):
it describes the whole event, envelope and `data`.

## Versioning

Within a version the only allowed change is a new optional field. Payloads are closed
(`additionalProperties: false`; Lockstep's own consumers reject unknown fields too), so upgrade
consumers, and any copy of a schema you validate against, before producers send a new field.
Removing, renaming or retyping a field, or tightening a constraint, makes a new version: a new
class with `schema_version = 2` for the same `type` and subject, with its own schema file.
Consumers must know a version before anyone sends it (an unknown version is dead-lettered), so
readers of v2 are deployed first.
"""
