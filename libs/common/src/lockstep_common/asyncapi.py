"""The AsyncAPI 3.0 document of Lockstep's events, and the routing facts ``schemadocs`` shares.

Addresses come from the real subject builders (called with stand-in tokens), storage from
``topology.EVENT_STREAMS`` and schemas from the event models, so a change to any of them changes
the document. The table saying which class travels where is ``schemadocs.ROUTES``.
"""

from __future__ import annotations

import inspect
import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic.json_schema import DEFAULT_REF_TEMPLATE

from lockstep_common import deadletter, subjects, topology
from lockstep_common.envelope import (
    CONTENT_TYPE,
    MSG_ID_HEADER,
    EventData,
    envelope_model,
    make_envelope,
    source_of,
)
from lockstep_common.settings import ServiceSettings

Json = dict[str, Any]

# Builders check their arguments are subject tokens, so "{site}" cannot be passed in: these
# stand-ins are valid tokens, swapped for AsyncAPI parameters after the call.
ROLLOUT, SITE, NODE, ORIGINAL = "PARAM-rollout", "PARAM-site", "PARAM-node", "PARAM-subject"
PROFILE = "PARAM-profile"
IDENTITY, SERVICE, COMMAND = "PARAM-identity", "PARAM-service", "PARAM-command"
_PARAMETERS = {
    ROLLOUT: ("rollout", "Rollout id (one subject token)."),
    PROFILE: ("profile", "Hardware profile (one subject token)."),
    SITE: ("site", "Site id (one subject token)."),
    NODE: ("node", "Node id (one subject token)."),
    ORIGINAL: ("subject", "The original's subject without the namespace (several tokens)."),
    IDENTITY: ("identity", "The asking NATS identity: the server lets each publish only its own."),
    SERVICE: ("service", "The service that owns the command."),
    COMMAND: ("command", "The command (one or more tokens, e.g. fleet.list)."),
}
# CloudEvents 1.0 requires specversion, id, source and type; Lockstep also always sends time,
# schemaversion and data. The model gives id and time defaults (so pydantic marks them optional),
# but a message without them would get a fresh id or time on every delivery.
_WIRE_REQUIRED = frozenset({"specversion", "id", "source", "type", "time", "schemaversion", "data"})
_COMPONENT_REF = "#/components/schemas/{model}"
_EXAMPLE_TIME = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Route:
    """Where one event class travels (``subject`` calls its builder with the stand-ins above).

    ``reply`` marks the reply to a core NATS request on ``subject``: it goes to the requester's
    inbox, not to ``subject``.
    """

    subject: Callable[[], str]
    producers: tuple[str, ...]
    consumers: tuple[str, ...]
    reply: bool = False


def namespace() -> subjects.Namespace:
    """The namespace the documents show: the default of ``LOCKSTEP_NAMESPACE``."""
    return subjects.Namespace(str(ServiceSettings.model_fields["namespace"].default))


def address(route: Route) -> str:
    """The wire subject of a route with ``{parameter}`` in place of each variable token."""
    wire = namespace().wire(route.subject())
    return ".".join(f"{{{_PARAMETERS[t][0]}}}" if t in _PARAMETERS else t for t in wire.split("."))


def channel_id(route: Route) -> str:
    """A stable channel key: the logical subject without its variable tokens."""
    fixed = [t for t in route.subject().split(".") if t not in _PARAMETERS]
    return ".".join(fixed) + (".reply" if route.reply else "")


def message_key(cls: type[EventData]) -> str:
    """The component key of an event's message and envelope schema, e.g. ``drift.detected.v1``."""
    return f"{cls.event_type}.v{cls.schema_version}"


def docstring(cls: type[EventData]) -> str:
    """The class docstring: every event must explain itself, the documents quote it."""
    if not cls.__doc__:
        raise ValueError(f"event class {cls.__name__} has no docstring to document it with")
    return inspect.cleandoc(cls.__doc__)


def envelope_schema(cls: type[EventData], ref_template: str = DEFAULT_REF_TEMPLATE) -> Json:
    """The JSON Schema of a whole CloudEvent carrying ``cls``, with wire attribute names."""
    schema = envelope_model(cls).model_json_schema(by_alias=True, ref_template=ref_template)
    props = schema["properties"]
    props["type"]["const"] = cls.cloudevents_type()
    props["schemaversion"]["const"] = cls.schema_version
    schema["required"] = sorted(_WIRE_REQUIRED | set(schema.get("required", ())))
    schema["title"] = f"{cls.__name__} ({cls.cloudevents_type()} v{cls.schema_version})"
    schema["description"] = docstring(cls)
    return schema


def stream_of(route: Route) -> topology.StreamSpec | None:
    """The JetStream stream that stores a route's subject; None for core NATS."""
    try:
        name = topology.stream_for(namespace(), route.subject())
    except ValueError:
        return None
    return next(s for s in topology.EVENT_STREAMS if namespace().stream(s.base) == name)


def document(
    routes: Mapping[type[EventData], Route],
    examples: Mapping[type[EventData], EventData],
    version: str,
) -> Json:
    """The AsyncAPI 3.0.0 document for ``routes``.

    Args:
        routes: every event class and where it travels.
        examples: one instance per class, shown as the message example.
        version: the document's ``info.version``.

    Raises:
        ValueError: a class has no example, a reply has no request, or two nested models with
            the same name have different schemas.
    """
    doc: Json = {
        "asyncapi": "3.0.0",
        "info": {"title": "Lockstep", "version": version, "description": _info()},
        "defaultContentType": CONTENT_TYPE,
        "channels": {},
        "operations": {},
        "components": {
            "messages": {},
            "schemas": {"JetStreamHeaders": _headers(_JETSTREAM_HEADERS)},
        },
    }
    for n, (cls, route) in enumerate(routes.items(), start=1):
        if cls not in examples:
            raise ValueError(f"no example of {cls.__name__}: add one to samples.samples()")
        _add_event(doc, cls, route, examples[cls], n, routes)
    for cls, route in routes.items():
        if route.reply and not any(replies_to(route, r) for r in routes.values() if not r.reply):
            raise ValueError(f"{cls.__name__} replies to {route.subject()}, which nothing requests")
        _add_operations(doc, cls, route, routes)
    _add_dead_letters(doc)
    return doc


def _info() -> str:
    prefix = namespace().wire("")
    return (
        "Every subject Lockstep uses on NATS, who publishes and who reads it, and the schema of "
        "each message.\n\n"
        "- **CloudEvents 1.0, structured mode.** A message body is one whole CloudEvent in JSON "
        f"(`{CONTENT_TYPE}`): `specversion`, `id`, `source`, `type`, `time`, `subject`, "
        "`datacontenttype`, `dataschema`, the extension attributes `schemaversion` and "
        "`correlationid`, and the payload in `data`. Decode by (`type`, `schemaversion`).\n"
        f"- **Namespace.** Every subject on the wire starts with the deployment's namespace, "
        f"`{prefix}` by default (`LOCKSTEP_NAMESPACE`), as the addresses below show; stream "
        f"names carry it too (`{namespace().stream('DRIFT')}`).\n"
        f"- **`{MSG_ID_HEADER}` = `id`.** JetStream messages carry the event's `id` in the "
        f"`{MSG_ID_HEADER}` header, so JetStream drops a re-publish within the duplicate window. "
        "Delivery is at least once: consumers deduplicate on `id`.\n"
        "- **Schemas.** Each envelope schema is also in `schemas/<type>.v<version>.json` "
        "(JSON Schema 2020-12), whose `$id` is the event's `dataschema`."
    )


def replies_to(reply: Route, request: Route) -> bool:
    """Whether ``reply`` answers ``request``: the same subject, or, for a reply every command of
    a family may get (``ops.refused``), a subject whose ``{service}`` and trailing
    ``{command}`` stand for any."""
    r, q = reply.subject().split("."), request.subject().split(".")
    if r and r[-1] == COMMAND:
        head = r[:-1]
        return len(q) > len(head) and all(a in (b, SERVICE) for a, b in zip(head, q, strict=False))
    return r == q


def _add_event(
    doc: Json,
    cls: type[EventData],
    route: Route,
    sample: EventData,
    n: int,
    routes: Mapping[type[EventData], Route],
) -> None:
    key = message_key(cls)
    jetstream = stream_of(route) is not None
    doc["components"]["messages"][key] = _message(cls, route, sample, n, jetstream=jetstream)
    _add_schemas(doc["components"]["schemas"], cls)
    cids = [channel_id(route)]
    if route.reply:  # on the reply channel of every request it answers
        cids = sorted(
            {
                channel_id(r) + ".reply"
                for r in routes.values()
                if not r.reply and replies_to(route, r)
            }
        )
    for cid in cids:
        fresh = _channel(route)
        channel = doc["channels"].setdefault(cid, fresh)
        if channel["address"] != fresh["address"]:
            raise ValueError(f"two subject patterns would share channel id {cid!r}")
        channel["messages"][key] = {"$ref": f"#/components/messages/{key}"}


def _channel(route: Route) -> Json:
    if route.reply:
        return {
            "address": None,
            "description": "The requester's inbox: the reply subject of the core NATS request.",
            "messages": {},
        }
    wire = address(route)
    params = [name for name, _ in _PARAMETERS.values() if f"{{{name}}}" in wire]
    by_name = dict(_PARAMETERS.values())
    stream = stream_of(route)
    where = (
        f"Stored in JetStream stream `{namespace().stream(stream.base)}` ({stream.description}; "
        f"kept {stream.max_age_s / topology.DAY:g} days)."
        if stream
        else "Core NATS: not stored in JetStream, so no replay and no duplicate window."
    )
    channel: Json = {"address": wire, "description": where, "messages": {}}
    if params:
        channel["parameters"] = {p: {"description": by_name[p]} for p in params}
    return channel


def _message(
    cls: type[EventData], route: Route, sample: EventData, n: int, *, jetstream: bool
) -> Json:
    event_id = uuid.UUID(int=n)
    envelope = make_envelope(
        sample,
        # An event nothing produces yet is shown as Lockstep's own.
        source=source_of(route.producers[0] if route.producers else "lockstep"),
        event_id=event_id,
        occurred_at=_EXAMPLE_TIME,
    )
    example: Json = {"name": cls.event_type, "payload": json.loads(envelope.to_json())}
    message: Json = {
        "name": cls.__name__,
        "title": f"{cls.cloudevents_type()} v{cls.schema_version}",
        "summary": docstring(cls).splitlines()[0],
        "contentType": CONTENT_TYPE,
        "payload": {"$ref": _COMPONENT_REF.format(model=message_key(cls))},
        "examples": [example],
    }
    if jetstream:
        message["headers"] = {"$ref": _COMPONENT_REF.format(model="JetStreamHeaders")}
        example["headers"] = {MSG_ID_HEADER: str(event_id)}
    return message


def _add_schemas(schemas: Json, cls: type[EventData]) -> None:
    root = envelope_schema(cls, _COMPONENT_REF)
    for name, schema in {**root.pop("$defs", {}), message_key(cls): root}.items():
        if schemas.setdefault(name, schema) != schema:
            raise ValueError(f"two different models are named {name!r}: rename one")


def _add_operations(
    doc: Json, cls: type[EventData], route: Route, routes: Mapping[type[EventData], Route]
) -> None:
    if route.reply:
        return  # described as the reply of the request's operations
    cid, key = channel_id(route), message_key(cls)
    replies = [c for c, r in routes.items() if r.reply and replies_to(r, route)]
    for action, parties in (("send", route.producers), ("receive", route.consumers)):
        for party in parties:
            op = doc["operations"].setdefault(
                f"{cid}.{action}.{party}", _operation(cid, action, party)
            )
            op["messages"].append({"$ref": f"#/channels/{cid}/messages/{key}"})
            if replies:
                op["reply"] = {
                    "channel": {"$ref": f"#/channels/{cid}.reply"},
                    "messages": [
                        {"$ref": f"#/channels/{cid}.reply/messages/{message_key(c)}"}
                        for c in replies
                    ],
                }


def _operation(cid: str, action: str, party: str) -> Json:
    verb = "Published" if action == "send" else "Read"
    return {
        "action": action,
        "channel": {"$ref": f"#/channels/{cid}"},
        "summary": f"{verb} by {party}.",
        "messages": [],
    }


_HEADER_TYPES: dict[str, Json] = {
    "uuid": {"type": "string", "format": "uuid"},
    "text": {"type": "string", "maxLength": 1000},
    "count": {"type": "string", "pattern": "^[0-9]+$"},
}
_JETSTREAM_HEADERS = {
    MSG_ID_HEADER: ("uuid", "The event's `id`: JetStream drops a re-publish of it (dedup window)."),
}
_DEAD_LETTER_HEADERS = {
    MSG_ID_HEADER: ("uuid", "A random id of this copy (not the original's `id`)."),
    deadletter.REASON_HEADER: ("text", "Why it was given up on: the error or advisory reason."),
    deadletter.KIND_HEADER: ("text", "Error class name, e.g. `InvalidMessage`, `Terminated`."),
    deadletter.DELIVERIES_HEADER: ("count", "How many times it was delivered."),
    deadletter.CONSUMER_HEADER: ("text", "The durable consumer that gave up on it."),
    deadletter.STREAM_HEADER: ("text", "The original's stream, e.g. `LOCKSTEP_DRIFT`."),
    deadletter.SEQUENCE_HEADER: ("count", "The original's sequence number in that stream."),
    deadletter.DIGEST_HEADER: ("text", "SHA-256 (hex) of the whole original body."),
    deadletter.TRUNCATED_HEADER: (
        "count",
        f"Present when the original was longer than {deadletter.COPY_BODY_LIMIT} bytes: its "
        "size. The body then holds its first bytes; the service's dead_letters row keeps all.",
    ),
}
_OPTIONAL_DEAD_LETTER_HEADERS = frozenset({deadletter.TRUNCATED_HEADER})


def _headers(rows: Mapping[str, tuple[str, str]], optional: frozenset[str] = frozenset()) -> Json:
    """A headers schema from name -> (kind, description); NATS header values are strings."""
    return {
        "type": "object",
        "required": sorted(set(rows) - optional),
        "properties": {
            name: {**_HEADER_TYPES[k], "description": d} for name, (k, d) in rows.items()
        },
    }


def _add_dead_letters(doc: Json) -> None:
    route = Route(lambda: subjects.dead_letter(ORIGINAL), ("every-consumer",), ("operators",))
    doc["channels"]["dlq"] = _channel(route)
    doc["channels"]["dlq"]["messages"]["dead-letter"] = {
        "$ref": "#/components/messages/dead-letter"
    }
    doc["components"]["schemas"]["DeadLetterHeaders"] = _headers(
        _DEAD_LETTER_HEADERS, _OPTIONAL_DEAD_LETTER_HEADERS
    )
    doc["components"]["messages"]["dead-letter"] = {
        "name": "DeadLetter",
        "title": "Dead letter",
        "summary": "A copy of a message that a consumer could not process.",
        "contentType": "application/octet-stream",
        "headers": {"$ref": _COMPONENT_REF.format(model="DeadLetterHeaders")},
        "payload": {
            "description": "The original message body, byte for byte: usually a CloudEvent, "
            "possibly malformed (the reason it is here); empty when the original had already "
            "left its stream."
        },
    }
    for action, parties in (("send", route.producers), ("receive", route.consumers)):
        for party in parties:
            op = doc["operations"][f"dlq.{action}.{party}"] = _operation("dlq", action, party)
            op["messages"].append({"$ref": "#/channels/dlq/messages/dead-letter"})
