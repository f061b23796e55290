"""The event envelope: CloudEvents 1.0 structured-mode JSON, one per NATS message.

Attribute names follow the CloudEvents 1.0 spec (``specversion``, ``id``, ``source``, ``type``,
``time``, ``subject``, ``datacontenttype``, ``dataschema``) so that platform teams can consume
Lockstep's events with standard CloudEvents SDKs; ``schemaversion`` and ``correlationid`` are
extension attributes (lower-case alphanumerics, as CloudEvents 1.0 section 3.1.1 requires).
In Python the same attributes carry readable names (``event_id``, ``occurred_at`` ...).

The envelope's ``id`` is also sent as the ``Nats-Msg-Id`` header, so JetStream's duplicate
window drops a re-publish of the same event (nats.docs, model_deep_dive.md).
"""

from __future__ import annotations

import json
import re
import uuid
from datetime import UTC, datetime
from functools import cache
from typing import Annotated, Any, ClassVar, Generic, Literal, TypeVar

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError

from lockstep_common.errors import InvalidMessage

CONTENT_TYPE = "application/cloudevents+json"
SOURCE_PREFIX = "/lockstep/"
TYPE_PREFIX = "lockstep."
MSG_ID_HEADER = "Nats-Msg-Id"


class EventData(BaseModel):
    """Base of every event payload: frozen, strict, and closed to unknown fields.

    Subclasses declare ``event_type`` (the CloudEvents ``type`` without the ``lockstep.``
    prefix, e.g. ``drift.detected``) and ``schema_version``. Adding an optional field keeps the
    version; removing, renaming or retyping a field makes a new version (a new class).
    """

    # No NaN or infinity: a gate comparing medians, or a column storing them, would be fooled.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    event_type: ClassVar[str]
    schema_version: ClassVar[int]

    @classmethod
    def cloudevents_type(cls) -> str:
        """The CloudEvents ``type`` attribute for this payload."""
        return TYPE_PREFIX + cls.event_type

    @classmethod
    def dataschema(cls) -> str:
        """The CloudEvents ``dataschema`` URI: the generated schema under ``docs/schemas``."""
        return f"urn:lockstep:schema:{cls.event_type}:v{cls.schema_version}"


def source_of(component: str) -> str:
    """The CloudEvents ``source`` of a Lockstep component (``inventory``, ``cli``, ``agent``):
    the one spelling, ``/lockstep/<component>``."""
    return SOURCE_PREFIX + component


DataT = TypeVar("DataT", bound=EventData)
# Covariant: an envelope is frozen, so an ``Envelope[A]`` is usable wherever an
# ``Envelope[A | B]`` is expected; a handler of both A and B is then a handler of A.
DataT_co = TypeVar("DataT_co", bound=EventData, covariant=True)


class Envelope(BaseModel, Generic[DataT_co]):
    """A CloudEvents 1.0 event carrying one Lockstep payload."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, strict=True, validate_by_name=True, validate_by_alias=True
    )

    specversion: Literal["1.0"] = Field(default="1.0", description="CloudEvents spec version.")
    # No defaults for id and time: a message without them must be rejected, not given a fresh
    # id on every decode (which would defeat the inbox). make_envelope always sets both.
    event_id: uuid.UUID = Field(
        alias="id", description="Unique event id; also the Nats-Msg-Id header and the inbox key."
    )
    source: Annotated[str, Field(min_length=1, max_length=255)] = Field(
        description="URI-reference of the producer, e.g. /lockstep/inventory."
    )
    type: Annotated[str, Field(min_length=1, max_length=128)] = Field(
        description="Event type, e.g. lockstep.drift.detected."
    )
    schema_version: Annotated[int, Field(ge=1)] = Field(
        alias="schemaversion", description="Version of the payload schema (extension attribute)."
    )
    occurred_at: AwareDatetime = Field(
        alias="time", description="When the fact happened (RFC 3339)."
    )
    subject: str | None = Field(
        default=None, max_length=255, description="What the event is about, e.g. a node id."
    )
    correlation_id: str | None = Field(
        alias="correlationid",
        default=None,
        max_length=128,
        description="The rollout, sweep or request this event belongs to (extension attribute).",
    )
    datacontenttype: Literal["application/json"] = Field(
        default="application/json", description="Media type of data."
    )
    dataschema: str | None = Field(default=None, description="URI of the payload's JSON Schema.")
    data: DataT_co = Field(description="The event payload.")

    def to_json(self) -> bytes:
        """Serialise with CloudEvents attribute names, leaving out unset optional attributes."""
        unset = {name for name in _OPTIONAL_ATTRIBUTES if getattr(self, name) is None}
        return self.model_dump_json(by_alias=True, exclude=unset).encode()


# CloudEvents 1.0 section 3: an optional attribute with no value is absent, not null.
_OPTIONAL_ATTRIBUTES = ("subject", "correlation_id", "dataschema")


def make_envelope(
    data: DataT,
    *,
    source: str,
    subject: str | None = None,
    correlation_id: str | None = None,
    event_id: uuid.UUID | None = None,
    occurred_at: datetime | None = None,
) -> Envelope[DataT]:
    """Wrap a payload in an envelope whose type, version and schema come from its class."""
    cls = type(data)
    # The cached model: ``Envelope[cls]`` is only weakly cached by pydantic and is rebuilt
    # (about a millisecond) whenever the garbage collector has dropped it.
    model: type[Envelope[DataT]] = envelope_model(cls)
    return model(
        event_id=event_id or uuid.uuid4(),
        source=source,
        type=cls.cloudevents_type(),
        schema_version=cls.schema_version,
        occurred_at=occurred_at or datetime.now(UTC),
        subject=subject,
        correlation_id=correlation_id,
        dataschema=cls.dataschema(),
        data=data,
    )


class EventRegistry:
    """Maps (CloudEvents type, schema version) to the payload class that decodes it."""

    def __init__(self, classes: list[type[EventData]]) -> None:
        self._by_key: dict[tuple[str, int], type[EventData]] = {}
        for cls in classes:
            key = (cls.cloudevents_type(), cls.schema_version)
            if key in self._by_key:
                raise ValueError(f"event type {key[0]} v{key[1]} is registered twice")
            self._by_key[key] = cls

    def classes(self) -> list[type[EventData]]:
        """Every registered payload class, in registration order."""
        return list(self._by_key.values())

    def lookup(self, event_type: str, version: int) -> type[EventData]:
        """The payload class for a type and version, or InvalidMessage naming what is unknown."""
        cls = self._by_key.get((event_type, version))
        if cls is None:
            known = sorted(v for t, v in self._by_key if t == event_type)
            if known:
                raise InvalidMessage(
                    f"unknown schema version {version} of event type {event_type!r} "
                    f"(known versions: {known})"
                )
            raise InvalidMessage(f"unknown event type {event_type!r}")
        return cls

    def _fast_decode(self, payload: bytes) -> Envelope[EventData] | None:
        """One parse instead of two for the common case: find ``type`` and ``schemaversion``
        by pattern and validate the payload once. Anything unusual (either attribute absent or
        present more than once, e.g. a nested ``"type"`` key, an unknown type, any validation
        error) returns None and takes the full path, which names the problem."""
        event_type, version = _only(_TYPE, payload), _only(_VERSION, payload)
        if event_type is None or version is None:
            return None
        cls = self._by_key.get((event_type.decode(), int(version)))
        if cls is None:
            return None
        try:
            env = envelope_model(cls).model_validate_json(payload)
        except ValidationError:
            return None
        # The patterns found what the envelope itself says (not, say, an escaped key's twin).
        return (
            env
            if (env.type, env.schema_version) == (cls.cloudevents_type(), cls.schema_version)
            else None
        )

    def decode(self, payload: bytes, *, max_bytes: int) -> Envelope[EventData]:
        """Decode and validate one message body.

        Raises:
            InvalidMessage: oversized, not JSON, not a CloudEvent, an unknown type or version,
                or a payload that does not match its schema; the message says which.
        """
        if len(payload) > max_bytes:
            raise InvalidMessage(f"message of {len(payload)} bytes exceeds limit of {max_bytes}")
        fast = self._fast_decode(payload)
        if fast is not None:
            return fast
        try:
            head = json.loads(payload)
        except RecursionError:
            # Deeply nested arrays or objects ("[" x 20,000): refused, never a crash.
            raise InvalidMessage("message body is nested too deeply to decode") from None
        except (ValueError, UnicodeDecodeError) as exc:
            raise InvalidMessage(f"message body is not JSON: {exc}") from None
        if not isinstance(head, dict):
            raise InvalidMessage("message body is not a JSON object")
        event_type, version = head.get("type"), head.get("schemaversion")
        if (
            not isinstance(event_type, str)
            or not isinstance(version, int)
            or isinstance(version, bool)
        ):
            raise InvalidMessage(
                "message is not a Lockstep CloudEvent: 'type' (string) and "
                "'schemaversion' (integer) are required"
            )
        cls = self.lookup(event_type, version)
        try:
            return envelope_model(cls).model_validate_json(payload)
        except ValidationError as exc:
            raise InvalidMessage(f"invalid {event_type} v{version}: {_summarise(exc)}") from None


_TYPE = re.compile(rb'"type"\s*:\s*"([^"\\]+)"')
_VERSION = re.compile(rb'"schemaversion"\s*:\s*([0-9]{1,9})[\s,}]')


def _only(pattern: re.Pattern[bytes], payload: bytes) -> bytes | None:
    found = pattern.findall(payload)
    return found[0] if len(found) == 1 else None


@cache
def envelope_model(cls: type[EventData]) -> type[Envelope[Any]]:
    """The parametrised envelope model for one payload class (cached: building it is costly)."""
    return Envelope[cls]  # type: ignore[valid-type]


def _summarise(exc: ValidationError, limit: int = 5) -> str:
    parts = []
    for err in exc.errors()[:limit]:
        where = ".".join(str(p) for p in err["loc"]) or "(root)"
        parts.append(f"{where}: {err['msg']}")
    more = exc.error_count() - limit
    if more > 0:
        parts.append(f"... and {more} more")
    return "; ".join(parts)
