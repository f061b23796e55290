"""The CloudEvents envelope: round trips, the wire format, and every way decoding refuses."""

from __future__ import annotations

import json
import math
import uuid
from datetime import UTC, datetime
from typing import Any, ClassVar

import pytest

from lockstep_common.envelope import Envelope, EventData, EventRegistry, make_envelope
from lockstep_common.errors import InvalidMessage, PermanentError
from lockstep_common.events import REGISTRY, v1
from lockstep_common.samples import samples
from lockstep_common.vocabulary import Component, DriftKind, GateVerdict, Severity

pytestmark = pytest.mark.unit

LIMIT = 1 << 20
AT = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
HASH = "ab" * 32

REQUIRED_ATTRIBUTES = {
    "specversion",
    "id",
    "source",
    "type",
    "schemaversion",
    "time",
    "datacontenttype",
    "dataschema",
    "data",
}


def _sample_id(sample: EventData) -> str:
    return type(sample).__name__


def _halted() -> v1.RolloutHalted:
    return v1.RolloutHalted(rollout_id="r-1", wave=1, reason="gate tripped", halted_by="gate")


def _wire(data: EventData, **attributes: Any) -> dict[str, Any]:
    """An event as a JSON object, ready to be tampered with."""
    head: dict[str, Any] = json.loads(make_envelope(data, source="/lockstep/test").to_json())
    head.update(attributes)
    return head


def _decode(head: object) -> Envelope[EventData]:
    return REGISTRY.decode(json.dumps(head).encode(), max_bytes=LIMIT)


def _refusal(payload: bytes, *, max_bytes: int = LIMIT) -> str:
    with pytest.raises(InvalidMessage) as caught:
        REGISTRY.decode(payload, max_bytes=max_bytes)
    return str(caught.value)


# --- round trips ------------------------------------------------------------------------------


@pytest.mark.parametrize("sample", samples(), ids=_sample_id)
def test_every_sample_round_trips_through_the_wire_to_an_equal_envelope(sample: EventData) -> None:
    sent = make_envelope(
        sample,
        source="/lockstep/test",
        subject="gb200-r07-n03",
        correlation_id="r-2026-11-21-a",
        event_id=uuid.UUID(int=7),
        occurred_at=AT,
    )

    received = REGISTRY.decode(sent.to_json(), max_bytes=LIMIT)

    assert received == sent
    assert type(received.data) is type(sample)
    assert received.data == sample


@pytest.mark.parametrize("sample", samples(), ids=_sample_id)
def test_every_sample_round_trips_without_optional_attributes(sample: EventData) -> None:
    sent = make_envelope(sample, source="/lockstep/test")

    received = REGISTRY.decode(sent.to_json(), max_bytes=LIMIT)

    assert received == sent
    assert received.subject is None
    assert received.correlation_id is None


def test_every_event_has_a_sample() -> None:
    sample_classes = [type(s) for s in samples()]

    assert set(sample_classes) == set(REGISTRY.classes())
    assert len(sample_classes) == len(set(sample_classes)), "one sample per event class"


def test_samples_follow_catalogue_order() -> None:
    assert [type(s) for s in samples()] == REGISTRY.classes()


def test_decode_picks_the_class_of_the_schema_version_on_the_wire() -> None:
    class DriftResolvedV2(EventData):
        event_type: ClassVar[str] = "drift.resolved"
        schema_version: ClassVar[int] = 2

        node_id: str
        reason: str

    registry = EventRegistry([v1.DriftResolved, DriftResolvedV2])
    old = make_envelope(v1.DriftResolved(node_id="n1", site="iad1", stack_hash=None), source="/t")
    new = make_envelope(DriftResolvedV2(node_id="n1", reason="reflashed"), source="/t")

    assert type(registry.decode(old.to_json(), max_bytes=LIMIT).data) is v1.DriftResolved
    assert registry.decode(new.to_json(), max_bytes=LIMIT).data == new.data


# --- the wire format --------------------------------------------------------------------------


def test_wire_json_uses_cloudevents_attribute_names() -> None:
    event_id = uuid.UUID(int=42)
    envelope = make_envelope(
        _halted(),
        source="/lockstep/planner",
        subject="r-1",
        correlation_id="r-1",
        event_id=event_id,
        occurred_at=AT,
    )

    head = json.loads(envelope.to_json())

    assert set(head) == REQUIRED_ATTRIBUTES | {"subject", "correlationid"}
    assert head["specversion"] == "1.0"
    assert head["id"] == str(event_id)
    assert head["source"] == "/lockstep/planner"
    assert head["type"] == "lockstep.rollout.halted"
    assert head["schemaversion"] == 1
    assert datetime.fromisoformat(head["time"]) == AT
    assert head["subject"] == "r-1"
    assert head["correlationid"] == "r-1"
    assert head["datacontenttype"] == "application/json"
    assert head["dataschema"] == "urn:lockstep:schema:rollout.halted:v1"
    assert head["data"] == {
        "rollout_id": "r-1",
        "wave": 1,
        "reason": "gate tripped",
        "halted_by": "gate",
    }


def test_wire_json_omits_unset_optional_attributes_instead_of_writing_null() -> None:
    head = json.loads(make_envelope(_halted(), source="/lockstep/planner").to_json())

    assert set(head) == REQUIRED_ATTRIBUTES
    assert "subject" not in head
    assert "correlationid" not in head


def test_wire_json_omits_dataschema_when_none_is_given() -> None:
    envelope = Envelope[v1.RolloutHalted](
        event_id=uuid.uuid4(),
        occurred_at=datetime.now(UTC),
        source="/lockstep/planner",
        type="lockstep.rollout.halted",
        schema_version=1,
        data=_halted(),
    )

    head = json.loads(envelope.to_json())

    assert "dataschema" not in head
    assert REGISTRY.decode(envelope.to_json(), max_bytes=LIMIT) == envelope


def test_required_payload_fields_that_are_null_stay_on_the_wire() -> None:
    data = v1.DriftResolved(node_id="n1", site="iad1", stack_hash=None)

    head = json.loads(make_envelope(data, source="/lockstep/inventory").to_json())

    assert head["data"] == {"node_id": "n1", "site": "iad1", "stack_hash": None}


def test_null_measurements_inside_nested_payload_parts_stay_on_the_wire() -> None:
    evidence = v1.MetricEvidence(metric="xid_79", treatment=None, control=None, passed=False)
    data = v1.GateInconclusive(
        rollout_id="r-1", wave=0, verdict=GateVerdict.INCONCLUSIVE, evidence=(evidence,)
    )

    head = json.loads(make_envelope(data, source="/lockstep/healthgate").to_json())

    assert head["data"]["evidence"][0]["treatment"] is None
    assert head["data"]["evidence"][0]["control"] is None


def test_envelope_type_and_schema_come_from_the_payload_class() -> None:
    data = v1.DriftDetected(
        node_id="n1",
        site="iad1",
        stack_hash=HASH,
        items=(
            v1.DriftItem(
                component=Component.BMC,
                expected="1",
                actual="2",
                kind=DriftKind.UNEXPECTED,
                severity=Severity.WARNING,
            ),
        ),
    )

    envelope = make_envelope(data, source="/lockstep/inventory")

    assert envelope.type == "lockstep.drift.detected"
    assert envelope.schema_version == 1
    assert envelope.dataschema == "urn:lockstep:schema:drift.detected:v1"
    assert envelope.occurred_at.tzinfo is not None


# --- what decoding refuses --------------------------------------------------------------------


def test_invalid_messages_are_permanent_errors() -> None:
    with pytest.raises(PermanentError):
        REGISTRY.decode(b"{", max_bytes=LIMIT)


@pytest.mark.parametrize("payload", [b"not json", b"\xff\xfe\x00", b"", b'{"type": '])
def test_non_json_bytes_are_refused(payload: bytes) -> None:
    assert "not JSON" in _refusal(payload)


@pytest.mark.parametrize("payload", [b"[]", b"[{}]", b'"lockstep.drift.detected"', b"42"])
def test_json_that_is_not_an_object_is_refused(payload: bytes) -> None:
    assert "not a JSON object" in _refusal(payload)


@pytest.mark.parametrize("missing", ["type", "schemaversion"])
def test_missing_type_or_schemaversion_is_refused_naming_both(missing: str) -> None:
    head = _wire(_halted())
    del head[missing]

    message = _refusal(json.dumps(head).encode())

    assert "'type'" in message
    assert "'schemaversion'" in message


def test_schemaversion_given_as_a_string_is_refused() -> None:
    message = _refusal(json.dumps(_wire(_halted(), schemaversion="1")).encode())

    assert "'schemaversion' (integer)" in message


def test_unknown_event_type_is_refused_naming_it() -> None:
    message = _refusal(json.dumps(_wire(_halted(), type="lockstep.rollout.exploded")).encode())

    assert "unknown event type 'lockstep.rollout.exploded'" in message


def test_unknown_schema_version_names_the_known_versions() -> None:
    message = _refusal(json.dumps(_wire(_halted(), schemaversion=7)).encode())

    assert "unknown schema version 7" in message
    assert "'lockstep.rollout.halted'" in message
    assert "known versions: [1]" in message


def test_oversize_message_is_refused_naming_the_limit() -> None:
    payload = make_envelope(_halted(), source="/lockstep/planner").to_json()
    limit = len(payload) - 1

    message = _refusal(payload, max_bytes=limit)

    assert f"limit of {limit}" in message
    assert f"message of {len(payload)} bytes" in message


def test_message_of_exactly_the_limit_is_accepted() -> None:
    payload = make_envelope(_halted(), source="/lockstep/planner").to_json()

    assert REGISTRY.decode(payload, max_bytes=len(payload)).data == _halted()


def test_unknown_field_in_data_is_refused_naming_it() -> None:
    head = _wire(_halted())
    head["data"]["surprise"] = 1

    message = _refusal(json.dumps(head).encode())

    assert "invalid lockstep.rollout.halted v1" in message
    assert "data.surprise" in message
    assert "not permitted" in message


def test_unknown_envelope_attribute_is_refused_naming_it() -> None:
    message = _refusal(json.dumps(_wire(_halted(), priority="high")).encode())

    assert "priority" in message


def test_strict_field_with_the_wrong_json_type_is_refused() -> None:
    head = _wire(_halted())
    head["data"]["wave"] = "1"

    message = _refusal(json.dumps(head).encode())

    assert "data.wave" in message
    assert "integer" in message


def test_naive_timestamp_for_time_is_refused() -> None:
    message = _refusal(json.dumps(_wire(_halted(), time="2026-11-21T12:00:00")).encode())

    assert "time:" in message
    assert "timezone" in message


def test_naive_timestamp_inside_the_payload_is_refused() -> None:
    sample = next(s for s in samples() if isinstance(s, v1.HealthObserved))
    head = _wire(sample)
    head["data"]["observed_at"] = "2026-11-21T12:00:00"

    assert "data.observed_at" in _refusal(json.dumps(head).encode())


def test_node_id_that_cannot_be_a_subject_token_is_refused_on_decode() -> None:
    head = _wire(v1.DriftResolved(node_id="n1", site="iad1", stack_hash=None))
    head["data"]["node_id"] = "n1.evil"

    assert "data.node_id" in _refusal(json.dumps(head).encode())


def test_wrong_specversion_is_refused() -> None:
    assert "specversion" in _refusal(json.dumps(_wire(_halted(), specversion="0.3")).encode())


def test_event_id_that_is_not_a_uuid_is_refused() -> None:
    assert "id:" in _refusal(json.dumps(_wire(_halted(), id="not-a-uuid")).encode())


# --- the registry -----------------------------------------------------------------------------


def test_registry_refuses_a_class_registered_twice() -> None:
    with pytest.raises(ValueError, match=r"lockstep\.drift\.resolved v1 is registered twice"):
        EventRegistry([v1.DriftResolved, v1.DriftDetected, v1.DriftResolved])


def test_registry_refuses_two_classes_claiming_the_same_type_and_version() -> None:
    class AnotherDriftResolved(EventData):
        event_type: ClassVar[str] = "drift.resolved"
        schema_version: ClassVar[int] = 1

    with pytest.raises(ValueError, match="registered twice"):
        EventRegistry([v1.DriftResolved, AnotherDriftResolved])


def test_registry_lists_classes_in_registration_order() -> None:
    registry = EventRegistry([v1.GateTripped, v1.BundleSubmitted])

    assert registry.classes() == [v1.GateTripped, v1.BundleSubmitted]


def test_a_boolean_schemaversion_is_not_taken_for_version_1() -> None:
    body = json.loads(make_envelope(samples()[0], source="/t").to_json())
    body["schemaversion"] = True
    with pytest.raises(InvalidMessage, match="'schemaversion' \\(integer\\) are required"):
        REGISTRY.decode(json.dumps(body).encode(), max_bytes=1 << 20)


@pytest.mark.parametrize("attribute", ["id", "time"])
def test_a_message_without_id_or_time_is_rejected_not_given_fresh_ones(attribute: str) -> None:
    body = json.loads(make_envelope(_halted(), source="/t").to_json())
    del body[attribute]
    with pytest.raises(InvalidMessage, match=f"{attribute}: Field required"):
        REGISTRY.decode(json.dumps(body).encode(), max_bytes=LIMIT)


def test_a_nested_type_key_does_not_mislead_the_single_parse_fast_path() -> None:
    env = make_envelope(
        v1.BundleSubmitted(bundle_uri="file:///b", submitted_by="ci"), source="/test"
    )
    doc = json.loads(env.to_json())
    doc["data"]["type"] = "lockstep.drift.detected"  # a stray key that looks like the attribute
    with pytest.raises(InvalidMessage, match=r"data\.type"):
        REGISTRY.decode(json.dumps(doc).encode(), max_bytes=1 << 20)
    # Pretty-printed or reordered JSON decodes the same as compact JSON.
    pretty = json.dumps(dict(reversed(json.loads(env.to_json()).items())), indent=2).encode()
    assert REGISTRY.decode(pretty, max_bytes=1 << 20) == env


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"[" * 20_000, "nested too deeply"),
        (b'{"a":' * 20_000, "nested too deeply"),
        (b'{"type": "lockstep.x", "schemaversion": 1' + b"9" * 5000 + b"}", "not JSON"),
        (b'{"type": "\xff\xfe"}', "not JSON"),
    ],
    ids=["nested arrays", "nested objects", "huge integer", "broken UTF-8"],
)
def test_hostile_bodies_are_invalid_messages_not_crashes(body: bytes, reason: str) -> None:
    with pytest.raises(InvalidMessage, match=reason):
        REGISTRY.decode(body, max_bytes=1 << 20)


def _inventory_body(**data: Any) -> bytes:
    sample = next(s for s in samples() if isinstance(s, v1.InventoryObserved))
    body = json.loads(make_envelope(sample, source="/t").to_json())
    body["data"].update(data)
    return json.dumps(body).encode()


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"members": {f"m{i}": "1.0" for i in range(v1.MAX_ITEMS + 1)}}, "data.members"),
        ({"firmware_dirs": ["1.0"] * (v1.MAX_SMALL + 1)}, "data.firmware_dirs"),
        ({"sequence": 2**63}, "data.sequence"),
        ({"sequence": -1}, "data.sequence"),
    ],
    ids=["a map too large", "a list too long", "a sequence past bigint", "a negative sequence"],
)
def test_every_collection_and_number_in_an_event_is_bounded(
    data: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidMessage, match=field):
        REGISTRY.decode(_inventory_body(**data), max_bytes=1 << 22)


@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_a_health_report_cannot_carry_nan_or_infinity(value: float) -> None:
    sample = next(s for s in samples() if isinstance(s, v1.HealthObserved))
    body = json.loads(make_envelope(sample, source="/t").to_json())
    body["data"]["sm_clock_mhz"] = value  # json.dumps writes NaN / Infinity, as a hostile peer may
    with pytest.raises(InvalidMessage, match=r"data\.sm_clock_mhz"):
        REGISTRY.decode(json.dumps(body).encode(), max_bytes=1 << 20)
