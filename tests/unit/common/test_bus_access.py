"""The permission matrix derived from the code: least privilege, by construction."""

from __future__ import annotations

import logging
import re
import ssl
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from lockstep_cli.catalog import bus_permissions, subscriptions_by_service
from lockstep_common import natsconn
from lockstep_common.bus_access import Party, matrix, node_agent
from lockstep_common.identities import ADMIN, AGENT, CLI, READER
from lockstep_common.natsconn import AccessError, NatsAccess, read_secret
from lockstep_common.subjects import Namespace
from lockstep_inventory.settings import Settings

NS = Namespace("lockstep")
GRANTS = bus_permissions(NS)
DESTRUCTIVE = re.compile(r"\$JS\.API\.(STREAM\.(UPDATE|DELETE|PURGE|MSG\.DELETE)|CONSUMER\.DELETE)")


def test_every_service_and_outside_party_has_an_identity_and_admin_is_reserved() -> None:
    assert set(GRANTS) == {*subscriptions_by_service(), CLI, AGENT, READER, ADMIN}
    with pytest.raises(ValueError, match="reserved"):
        matrix(NS, {ADMIN: Party()})


def test_only_admin_may_update_purge_or_delete_streams_and_consumers() -> None:
    for identity, grants in GRANTS.items():
        if identity != ADMIN:
            assert not [s for s in grants.publish if DESTRUCTIVE.match(s) or s.endswith("$JS.>")]


def test_each_identity_reads_only_its_own_inbox_and_only_services_answer() -> None:
    for identity, grants in GRANTS.items():
        inboxes = [s for s in grants.subscribe if s.startswith("_INBOX")]
        assert inboxes == [f"_INBOX_{identity}.>"]  # agent-<node>: filled in per node
        assert not [s for s in grants.publish if s.startswith("_INBOX")]
    # Every service answers operator commands about its dead letters, node agents the
    # updater's commands; only the inventory the admission check.
    assert {i for i, g in GRANTS.items() if g.responds} == {*subscriptions_by_service(), AGENT}
    assert {i for i, g in GRANTS.items() if "lockstep.admission.check" in g.subscribe} == {
        "inventory"
    }
    for service in subscriptions_by_service():
        dlq = [s for s in GRANTS[service].subscribe if s.endswith(".dlq.purge")]
        assert dlq == [f"lockstep.ops.*.{service}.dlq.purge"]


def test_only_the_updater_sends_node_commands_and_each_agent_hears_only_its_own() -> None:
    senders = {i for i, g in GRANTS.items() if any(".agent.command." in s for s in g.publish)}
    assert senders == {"updater"}  # and admin's lockstep.> (dead-letter replay)
    assert "lockstep.agent.command.*.*" in GRANTS["updater"].publish
    hearers = {i for i, g in GRANTS.items() if any(".agent.command." in s for s in g.subscribe)}
    assert hearers == {AGENT}
    assert [s for s in GRANTS[AGENT].subscribe if ".agent.command." in s] == [
        "lockstep.agent.command.<site>.<node>"
    ]


def test_a_service_fetches_and_acks_only_its_own_durables() -> None:
    inventory = GRANTS["inventory"].publish
    assert "$JS.API.CONSUMER.MSG.NEXT.LOCKSTEP_PINS.lockstep-inventory-pins" in inventory
    assert not [s for s in inventory if "lockstep-attest-" in s]
    assert not [s for s in GRANTS[CLI].publish + GRANTS[AGENT].publish if s.startswith("$JS")]


def test_outside_parties_send_only_what_channels_say_they_send() -> None:
    # Node agents: a template with their own site and node id, never a wildcard.
    assert GRANTS[AGENT].publish == (
        "lockstep.telemetry.observed.health.<site>.<node>",
        "lockstep.telemetry.observed.inventory.<site>.<node>",
    )
    one = node_agent(GRANTS[AGENT], "s1", "n1")
    assert one.publish == (
        "lockstep.telemetry.observed.health.s1.n1",
        "lockstep.telemetry.observed.inventory.s1.n1",
    )
    assert one.subscribe == ("_INBOX_agent-n1.>", "lockstep.agent.command.s1.n1")
    for bad in ("*", ">", "n1.n2", ""):
        with pytest.raises(ValueError, match="subject token"):
            node_agent(GRANTS[AGENT], "s1", bad)
    assert "lockstep.drift.detected.*.*" not in GRANTS[CLI].publish
    assert "lockstep.pin.changed.*" in GRANTS[CLI].publish


def test_a_reader_hears_drift_and_gate_verdicts_and_sends_only_its_own_requests() -> None:
    reader = GRANTS[READER]
    assert {"lockstep.drift.detected.*.*", "lockstep.gate.tripped.*"} <= set(reader.subscribe)
    assert "lockstep.telemetry.observed.health.*.*" not in reader.subscribe
    assert [s for s in reader.publish if not s.startswith("$JS.API.")] == ["lockstep.ops.reader.>"]
    assert not [s for s in reader.publish if "CONSUMER" in s]


def test_a_password_file_open_to_others_is_refused_without_quoting_it(tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_text("hunter2\n")
    secret.chmod(0o640)
    with pytest.raises(AccessError, match="chmod 600") as caught:
        read_secret(secret, "NATS password file")
    assert "hunter2" not in str(caught.value)
    secret.chmod(0o600)
    assert read_secret(secret, "NATS password file") == "hunter2"
    access = NatsAccess.from_url("tls://a:4222,tls://b:4222", "cli", secret, tmp_path / "ca.pem")
    assert access.env() == {
        "LOCKSTEP_NATS_URL": "tls://a:4222,tls://b:4222",
        "LOCKSTEP_NATS_USER": "cli",
        "LOCKSTEP_NATS_PASSWORD_FILE": str(secret),
        "LOCKSTEP_NATS_CA_FILE": str(tmp_path / "ca.pem"),
    }


def test_settings_refuse_a_user_without_password_file_and_a_readable_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOCKSTEP_NATS_USER", "inventory")
    with pytest.raises(ValidationError, match="needs a password file"):
        Settings()
    secret = tmp_path / "pw"
    secret.write_text("x\n")
    secret.chmod(0o604)
    monkeypatch.setenv("LOCKSTEP_NATS_PASSWORD_FILE", str(secret))
    with pytest.raises(ValidationError, match="open to other users"):
        Settings()
    secret.chmod(0o600)
    assert Settings().nats_access().user == "inventory"


async def test_asynchronous_nats_errors_are_one_debug_line_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A command's own call reports its failure; nats-py's default error callback would print
    a traceback for it (and for the TLS close race after the last reply) on the CLI's stderr."""
    import nats

    seen: dict[str, Any] = {}

    async def fake_connect(**options: Any) -> None:
        seen.update(options)

    monkeypatch.setattr(nats, "connect", fake_connect)
    await natsconn.connect(natsconn.NatsAccess(("nats://127.0.0.1:4222",)), name="t")
    caplog.set_level(logging.DEBUG, logger="lockstep_common.natsconn")
    await seen["error_cb"](ssl.SSLError("APPLICATION_DATA_AFTER_CLOSE_NOTIFY"))
    [record] = caplog.records
    assert record.levelno == logging.DEBUG and record.exc_info is None
    assert "SSLError" in record.getMessage()


def test_operators_ask_only_in_their_own_name_and_only_the_owner_answers() -> None:
    """Who asked an operator command is the subject's identity token: the server must let each
    identity publish there only as itself (issue 26, item 3)."""
    for identity, grants in GRANTS.items():
        ops = [s for s in grants.publish if s.startswith("lockstep.ops.")]
        if identity in (CLI, READER):
            assert ops == [f"lockstep.ops.{identity}.>"]
        elif identity != ADMIN:
            assert ops == [], identity
    answering = {
        i for i, g in GRANTS.items() if "lockstep.ops.*.inventory.fleet.remove" in g.subscribe
    }
    assert answering == {"inventory"}
    assert not [s for g in GRANTS.values() for s in g.subscribe if s.startswith("lockstep.ops.*.*")]
