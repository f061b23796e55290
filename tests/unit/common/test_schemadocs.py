"""Generated docs (JSON Schemas, AsyncAPI, events.md): up to date, complete, and truthful."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from lockstep_cli.catalog import parties
from lockstep_common import schemadocs
from lockstep_common.envelope import EventData, make_envelope
from lockstep_common.events import REGISTRY, v1
from lockstep_common.samples import samples

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[3]
PARTIES = parties()
WIRE_REQUIRED = {"specversion", "id", "source", "type", "time", "schemaversion", "data"}


def _resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if ref is None:
        return node
    target: Any = schema
    for part in ref.removeprefix("#/").split("/"):
        target = target[part]
    return dict(target)


@pytest.fixture(scope="module")
def rendered() -> dict[str, str]:
    return schemadocs.render(PARTIES)


@pytest.fixture(scope="module")
def asyncapi(rendered: dict[str, str]) -> dict[str, Any]:
    return dict(yaml.safe_load(rendered["asyncapi.yaml"]))


def test_docs_in_the_repo_are_up_to_date() -> None:
    stale = schemadocs.stale(REPO / "docs", PARTIES)
    assert stale == [], f"docs/ is stale, run `lockstep docs generate`: {stale}"


def test_rendering_is_deterministic(rendered: dict[str, str]) -> None:
    first = rendered
    assert first == schemadocs.render(PARTIES)
    assert list(first) == sorted(first)
    assert all(text.endswith("\n") for text in first.values())


@pytest.mark.parametrize("sample", samples(), ids=lambda s: type(s).event_type)
def test_every_sample_matches_its_envelope_schema(
    sample: EventData, rendered: dict[str, str]
) -> None:
    # jsonschema is not a dependency: check the facts a validator would rely on instead.
    cls = type(sample)
    schema = json.loads(rendered[schemadocs.schema_path(cls)])
    wire = json.loads(make_envelope(sample, source="/test").to_json())

    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"] == cls.dataschema() == wire["dataschema"]
    assert schema["description"] and schema["title"]
    assert WIRE_REQUIRED <= set(schema["required"]) <= set(wire)
    assert set(wire) <= set(schema["properties"])
    assert schema["additionalProperties"] is False
    assert schema["properties"]["type"]["const"] == wire["type"]
    assert schema["properties"]["schemaversion"]["const"] == wire["schemaversion"]

    data = _resolve(schema, schema["properties"]["data"])
    assert data["additionalProperties"] is False
    assert set(data.get("required", ())) <= set(wire["data"]) <= set(data["properties"])


def test_every_channel_address_is_namespaced(asyncapi: dict[str, Any]) -> None:
    channels = asyncapi["channels"]
    replies = {cid for cid, ch in channels.items() if ch["address"] is None}
    assert {c for c in replies if not c.startswith("ops.")} == {
        "admission.check.reply",
        "fleet.query.reply",
        "agent.command.reply",
    }
    for cid, channel in channels.items():
        if cid not in replies:
            assert channel["address"].startswith("lockstep."), cid
    assert channels["drift.detected"]["address"] == "lockstep.drift.detected.{site}.{node}"
    assert set(channels["drift.detected"]["parameters"]) == {"site", "node"}
    assert channels["dlq"]["address"] == "lockstep.dlq.{subject}"


def test_every_registered_class_has_a_message_on_a_channel(asyncapi: dict[str, Any]) -> None:
    doc = asyncapi
    on_channels = {
        ref["$ref"] for ch in doc["channels"].values() for ref in ch["messages"].values()
    }
    for cls in REGISTRY.classes():
        key = f"{cls.event_type}.v{cls.schema_version}"
        message = doc["components"]["messages"][key]
        assert f"#/components/messages/{key}" in on_channels
        assert message["contentType"] == "application/cloudevents+json"
        assert message["examples"][0]["payload"]["type"] == cls.cloudevents_type()


def test_admission_check_is_request_reply(asyncapi: dict[str, Any]) -> None:
    ops = asyncapi["operations"]
    for name in ("admission.check.send.schedulers", "admission.check.receive.inventory"):
        assert ops[name]["reply"]["channel"] == {"$ref": "#/channels/admission.check.reply"}


def test_dead_letter_headers_are_documented(asyncapi: dict[str, Any]) -> None:
    headers = asyncapi["components"]["schemas"]["DeadLetterHeaders"]
    assert {"Lockstep-Dlq-Reason", "Lockstep-Dlq-Deliveries", "Nats-Msg-Id"} <= set(
        headers["required"]
    )


def test_a_class_without_a_channel_stops_generation(monkeypatch: pytest.MonkeyPatch) -> None:
    channels = {c: r for c, r in schemadocs.CHANNELS.items() if c is not v1.DriftResolved}
    monkeypatch.setattr(schemadocs, "CHANNELS", channels)
    with pytest.raises(ValueError, match="no channel for DriftResolved"):
        schemadocs.render(PARTIES)


@pytest.mark.parametrize(
    ("cls", "service"),
    [
        (v1.PinChanged, "attest"),
        (v1.PinChanged, "inventory"),
        (v1.WavePlanned, "inventory"),
        (v1.WaveCompleted, "inventory"),
        (v1.RolloutHalted, "inventory"),
        (v1.RolloutCompleted, "inventory"),
        (v1.BundleSubmitted, "attest"),
        (v1.InventoryObserved, "inventory"),
        (v1.AdmissionCheckRequested, "inventory"),
    ],
)
def test_consumers_are_read_from_the_services_subscriptions(
    cls: type[EventData], service: str
) -> None:
    assert service in schemadocs.routes(PARTIES)[cls].consumers


def test_a_class_a_subscription_only_ignores_is_not_listed_as_consumed() -> None:
    # Inventory takes device.staged off its stream but acts on nothing in it.
    assert "inventory" not in schemadocs.routes(PARTIES)[v1.DeviceStaged].consumers
    assert "inventory" in schemadocs.routes(PARTIES)[v1.DeviceActivated].consumers


def test_a_new_subscription_makes_the_committed_docs_stale() -> None:
    more: dict[type[EventData], Sequence[str]] = {
        **PARTIES.consumers,
        v1.HealthObserved: ("planner",),
    }
    changed = schemadocs.Parties(PARTIES.producers, more)
    assert schemadocs.stale(REPO / "docs", changed) == ["asyncapi.yaml", "events.md"]


@pytest.mark.parametrize(
    ("cls", "service"),
    [
        (v1.BundleAttested, "attest"),
        (v1.BundleRejected, "attest"),
        (v1.DriftDetected, "inventory"),
        (v1.AdmissionCheckAnswered, "inventory"),
    ],
)
def test_producers_are_read_from_the_services_routers(cls: type[EventData], service: str) -> None:
    assert service in schemadocs.routes(PARTIES)[cls].producers


def test_no_service_is_said_to_produce_what_it_does_not_emit() -> None:
    # Only the planner releases waves; pins come from it (rollouts) and the CLI (by hand).
    assert schemadocs.routes(PARTIES)[v1.WavePlanned].producers == ("planner",)
    assert schemadocs.routes(PARTIES)[v1.PinChanged].producers == ("planner", "cli")
    assert "planner" not in schemadocs.routes(PARTIES)[v1.DriftDetected].producers


def test_write_then_stale_round_trip(tmp_path: Path, rendered: dict[str, str]) -> None:
    generated = dataclasses.replace(PARTIES, machines=())  # no hand-written pages here
    assert schemadocs.write(tmp_path, generated) == sorted(rendered)
    assert schemadocs.stale(tmp_path, generated) == []
    assert schemadocs.write(tmp_path, generated) == []

    (tmp_path / "events.md").write_text("edited\n")
    (tmp_path / "schemas" / "gone.event.v1.json").write_text("{}\n")
    assert schemadocs.stale(tmp_path, generated) == ["events.md", "schemas/gone.event.v1.json"]
    assert schemadocs.write(tmp_path, generated) == ["events.md", "schemas/gone.event.v1.json"]
    assert not (tmp_path / "schemas" / "gone.event.v1.json").exists()
    assert schemadocs.stale(tmp_path, generated) == []


def test_an_operator_command_is_asked_in_the_askers_name_and_may_be_refused(
    asyncapi: dict[str, Any],
) -> None:
    """Each operator command: a request on ops.{identity}.<service>.<command>, answered by its
    typed answer or by ops.refused on the same reply channel."""
    channel = asyncapi["channels"]["ops.inventory.fleet.remove"]
    assert channel["address"] == "lockstep.ops.{identity}.inventory.fleet.remove"
    assert set(channel["parameters"]) == {"identity"}
    reply = asyncapi["channels"]["ops.inventory.fleet.remove.reply"]
    assert set(reply["messages"]) == {"ops.fleet.remove.answered.v1", "ops.refused.v1"}
    sent = asyncapi["operations"]["ops.inventory.fleet.remove.receive.inventory"]
    assert sent["reply"]["channel"] == {"$ref": "#/channels/ops.inventory.fleet.remove.reply"}
