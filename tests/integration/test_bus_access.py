"""The bus as an attacker on the same machine meets it: TLS and one identity per party, each
allowed exactly what the code declares (``bus_access``, ``catalog.bus_permissions``).

A stack of its own: an embedded nats-server configured the way ``lockstep up`` configures it,
with no stream created, so that every JetStream call an identity is allowed to make answers
"not found" and changes nothing, while every call it is not allowed is refused by the server.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import ssl
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from pydantic_settings import SettingsConfigDict

from lockstep_cli.catalog import bus_permissions, subscriptions_by_service
from lockstep_cli.polling import until
from lockstep_cli.supervisor import provision_topology
from lockstep_common import natsconn, subjects
from lockstep_common.bus_access import Permissions, node_agent
from lockstep_common.errors import ConfigurationError
from lockstep_common.identities import ADMIN, AGENT, CLI, READER, agent_identity
from lockstep_common.schemadocs import CHANNELS
from lockstep_common.service import ServiceApp
from lockstep_common.settings import ServiceSettings
from lockstep_common.subjects import Namespace
from lockstep_devstack import Stack, agents
from lockstep_devstack.nats import NatsServer
from tests.conftest import Servers

NS = Namespace("lockstep")
PERMISSION_ERROR = "Permissions Violation"


@pytest.fixture(scope="module")
def stack(servers: Servers) -> Iterator[Stack]:
    data_dir = Path(tempfile.mkdtemp(prefix="lockstep-bus-"))
    try:
        agents.enroll(data_dir, {"n1": "s1"})  # the node agents' template, filled in for n1
        with Stack(
            data_dir, database_url=servers.database_url, durable=False, access=bus_permissions(NS)
        ) as st:
            yield st
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def matches(pattern: str, subject: str) -> bool:
    """NATS subject matching: ``*`` one token, ``>`` one or more trailing tokens."""
    p, s = pattern.split("."), subject.split(".")
    for i, token in enumerate(p):
        if token == ">":
            return len(s) > i
        if i >= len(s) or (token != "*" and token != s[i]):
            return False
    return len(p) == len(s)


def declared(grants: Permissions | tuple[str, ...], subject: str) -> bool:
    if isinstance(grants, Permissions):  # its publish grants, less what it denies
        return declared(grants.publish, subject) and not declared(grants.publish_deny, subject)
    return any(matches(g, subject) for g in grants)


def probes() -> list[str]:
    """One concrete subject per event class and per JetStream call a party could try."""
    events = [
        NS.wire(
            ".".join(
                {"PARAM-rollout": "r1", "PARAM-site": "s1", "PARAM-node": "n1"}.get(t, t)
                for t in channel.subject().split(".")
            )
        )
        for channel in CHANNELS.values()
    ]
    events += [NS.wire(subjects.dead_letter("pin.changed.s1")), NS.wire("bogus.subject")]
    # Another node's reports: no node agent may send them (the agent probed is n1's).
    events += [NS.wire(subjects.health_observed("s1", "n2"))]
    events += [NS.wire(subjects.inventory_observed("s2", "n1"))]
    # Operator commands in each identity's name: each may ask only as itself.
    events += [
        NS.wire(subjects.ops_request(identity, "inventory", "fleet.remove"))
        for identity in (CLI, READER, ADMIN, agent_identity("n1"), "inventory")
    ]
    # A command to a node's agent: the updater's alone (not even the admin's).
    events += [NS.wire(subjects.node_command("s1", "n1"))]
    streams = ("LOCKSTEP_DLQ", "LOCKSTEP_PINS", "LOCKSTEP_BUNDLES", "LOCKSTEP_TELEMETRY")
    calls = ("INFO", "CREATE", "UPDATE", "DELETE", "PURGE", "MSG.DELETE", "MSG.GET")
    js = [f"$JS.API.STREAM.{call}.{stream}" for stream in streams for call in calls]
    durables = [
        (NS.stream(sub.stream), NS.durable(sub.name))
        for subs in subscriptions_by_service().values()
        for sub in subs
    ]
    for stream, durable in durables:
        js += [
            f"$JS.API.CONSUMER.{call}.{stream}.{durable}"
            for call in ("INFO", "CREATE", "DELETE", "MSG.NEXT", "DURABLE.CREATE")
        ]
        js.append(f"$JS.ACK.{stream}.{durable}.1.1.1.1.1")
    js += ["$JS.API.INFO", "$JS.API.STREAM.LIST", "$JS.API.STREAM.NAMES"]
    # The admin calls of GHSA-fhg8-qxh5-7q3w and GHSA-9983-vrx2-fg9c (reliability.md 5.1).
    js += ["$JS.API.ACCOUNT.PURGE.$G", "$JS.API.STREAM.RESTORE.LOCKSTEP_DLQ"]
    return events + js


async def connect_as(stack: Stack, identity: str, errors: list[str]) -> NatsClient:
    async def record(exc: Exception) -> None:
        errors.append(str(exc).removeprefix("nats: ").lower())

    return await natsconn.connect(
        stack.nats_client(identity), name=f"probe-{identity}", error_cb=record
    )


# Denied to every identity (nobody may publish into, or read, an inbox not its own): the
# server reports violations in order, so once this one's report is in, all earlier ones are.
SENTINEL = "_INBOX_nobody.sentinel"


async def settled(nc: NatsClient, errors: list[str], kind: str) -> None:
    """Wait until the server's reports for everything sent before ``SENTINEL`` are in."""
    if kind == "Publish":
        await nc.publish(SENTINEL, b"")
    else:
        await nc.subscribe(SENTINEL)
    await nc.flush()

    async def arrived() -> bool:
        return refused(errors, kind, SENTINEL)

    await until(arrived, f"the server's report on {SENTINEL}", timeout_s=10)


def refused(errors: list[str], kind: str, subject: str) -> bool:
    # nats.py lower-cases the server's -ERR line, subject included.
    return f'{PERMISSION_ERROR} for {kind} to "{subject}"'.lower() in errors


def concrete() -> dict[str, Permissions]:
    """The matrix with the node agents' template filled in for node n1 at site s1."""
    out = bus_permissions(NS)
    out[agent_identity("n1")] = node_agent(out.pop(AGENT), "s1", "n1")
    return out


@pytest.fixture(scope="module")
def grants() -> dict[str, Permissions]:
    return concrete()


@pytest.mark.parametrize("identity", [*sorted(concrete())])
async def test_every_identity_may_publish_exactly_what_it_declares(
    stack: Stack, grants: dict[str, Permissions], identity: str
) -> None:
    errors: list[str] = []
    nc = await connect_as(stack, identity, errors)
    try:
        for subject in probes():
            await nc.publish(subject, b"")
        await settled(nc, errors, "Publish")
    finally:
        await nc.close()
    wrong = [
        (s, "allowed" if declared(grants[identity], s) else "denied")
        for s in probes()
        if declared(grants[identity], s) == refused(errors, "Publish", s)
    ]
    assert wrong == [], f"{identity}: server disagrees with the matrix (declared)"


async def test_the_cli_may_not_submit_an_intent_but_may_ask_the_planner_to_start(
    stack: Stack,
) -> None:
    """Issue 26: ``rollout start`` asks the planner (``rollout.start``), which records the
    intent itself; an intent published by the cli identity is refused by the server, so no
    operator tool can skip the planner's checks and audit of who asked."""
    intent = NS.wire(subjects.intent_submitted())
    start = NS.wire(subjects.ops_request(CLI, "planner", "rollout.start"))
    errors: list[str] = []
    nc = await connect_as(stack, CLI, errors)
    try:
        await nc.publish(intent, b"{}")
        await nc.publish(start, b"{}")
        await settled(nc, errors, "Publish")
    finally:
        await nc.close()
    assert refused(errors, "Publish", intent), errors
    assert not refused(errors, "Publish", start), errors


async def test_the_admin_may_neither_command_a_node_agent_nor_ask_in_another_name(
    stack: Stack,
) -> None:
    """The admin manages streams and republishes dead letters over the whole namespace, but a
    command to a node's agent is the updater's alone (sent after its guard and fence: one from
    the admin would reach a node beyond the canary around both), and an operator command
    speaks for the identity in its subject; its own operator commands still go."""
    command = NS.wire(subjects.node_command("s1", "n1"))
    as_cli = NS.wire(subjects.ops_request(CLI, "planner", "rollout.start"))
    own = NS.wire(subjects.ops_request(ADMIN, "planner", "rollout.start"))
    event = NS.wire(subjects.pin_changed("s1"))  # a dead letter's replay: still allowed
    errors: list[str] = []
    nc = await connect_as(stack, ADMIN, errors)
    try:
        for subject in (command, as_cli, own, event):
            await nc.publish(subject, b"{}")
        await settled(nc, errors, "Publish")
    finally:
        await nc.close()
    assert refused(errors, "Publish", command), errors
    assert refused(errors, "Publish", as_cli), errors
    assert not refused(errors, "Publish", own), errors
    assert not refused(errors, "Publish", event), errors


@pytest.mark.parametrize("identity", [*sorted(concrete())])
async def test_every_identity_may_subscribe_only_to_its_inbox_and_what_it_answers(
    stack: Stack, grants: dict[str, Permissions], identity: str
) -> None:
    others = [f"{natsconn.inbox_prefix(i)}.x" for i in grants]
    candidates = [*others, NS.wire("admission.check"), NS.wire(">"), ">", "$JS.API.>"]
    candidates += [NS.wire("drift.detected.s1.n1"), NS.wire("pin.changed.s1")]
    candidates += [NS.wire(subjects.ops_command_all("inventory", "fleet.remove"))]
    errors: list[str] = []
    nc = await connect_as(stack, identity, errors)
    try:
        for subject in candidates:
            await nc.subscribe(subject)
        await settled(nc, errors, "Subscription")
    finally:
        await nc.close()
    for subject in candidates:
        allowed = declared(grants[identity].subscribe, subject)
        assert refused(errors, "Subscription", subject) != allowed, (identity, subject)


async def test_anonymous_wrong_password_and_another_stacks_password_are_refused(
    stack: Stack, tmp_path: Path
) -> None:
    assert stack.nats is not None
    tls = ssl.create_default_context(cafile=str(stack.nats.ca_file))
    url = str(stack.nats_url)
    other = tmp_path / "password"
    other.write_text("a-password-of-another-stack\n")
    other.chmod(0o600)
    for options in (
        {},
        {"user": CLI, "password": "guess"},
        {"user": ADMIN, "password": other.read_text().strip()},
    ):
        with pytest.raises(nats.errors.Error, match="Authorization Violation"):
            await nats.connect(
                [url], tls=tls, allow_reconnect=False, max_reconnect_attempts=0, **options
            )


async def test_plaintext_is_refused_by_the_server(stack: Stack) -> None:
    assert isinstance(stack.nats, NatsServer)
    reader, writer = await asyncio.open_connection("127.0.0.1", stack.nats.port)
    try:
        info = json.loads((await reader.readline()).decode().removeprefix("INFO "))
        assert info["tls_required"] is True
        writer.write(b'CONNECT {"verbose":false,"user":"cli","pass":"x"}\r\nPING\r\n')
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(200), timeout=10)
    finally:
        writer.close()
    assert b"PONG" not in answer  # never served: an error, or the connection simply closed


async def test_a_rogue_subscriber_can_neither_hear_nor_answer_an_admission_check(
    stack: Stack,
) -> None:
    subject = NS.wire(subjects.admission_check())
    responder_errors: list[str] = []
    rogue_errors: list[str] = []
    inventory = await connect_as(stack, "inventory", responder_errors)
    rogue = await connect_as(stack, agent_identity("n1"), rogue_errors)
    cli = await connect_as(stack, CLI, [])
    heard: list[str] = []
    try:

        async def answer(msg: Msg) -> None:
            await inventory.publish(msg.reply, b"genuine")

        async def hijack(msg: Msg) -> None:
            heard.append(msg.reply)
            await rogue.publish(msg.reply, b"forged")

        await inventory.subscribe(subject, cb=answer)
        await rogue.subscribe(subject, cb=hijack)
        await rogue.subscribe(f"{natsconn.inbox_prefix(CLI)}.>", cb=hijack)
        await inventory.flush()
        await rogue.flush()
        replies = [(await cli.request(subject, b"{}", timeout=5)).data for _ in range(10)]
        # Not even a guess: publishing into the requester's inbox is refused, to every party
        # but the responder answering a request it received.
        await rogue.publish(f"{natsconn.inbox_prefix(CLI)}.guess", b"forged")
        await inventory.publish(f"{natsconn.inbox_prefix(CLI)}.unsolicited", b"forged")
        await settled(rogue, rogue_errors, "Publish")
        await settled(inventory, responder_errors, "Publish")
    finally:
        for nc in (inventory, rogue, cli):
            await nc.close()
    assert replies == [b"genuine"] * 10
    assert heard == []
    assert refused(rogue_errors, "Subscription", subject)
    assert refused(rogue_errors, "Publish", f"{natsconn.inbox_prefix(CLI)}.guess")
    assert refused(responder_errors, "Publish", f"{natsconn.inbox_prefix(CLI)}.unsolicited")


async def test_an_operator_asks_only_in_its_own_name_and_only_the_owner_hears_it(
    stack: Stack,
) -> None:
    """The identity token of ``ops.<identity>.<service>.<command>`` is the server's word: the
    reader cannot ask as cli (to run a write), cli cannot ask as anyone else, and no service
    but the owner can subscribe to a command (issue 26, item 3)."""
    remove = subjects.ops_command_all("inventory", "fleet.remove")
    owner_errors: list[str] = []
    owner = await connect_as(stack, "inventory", owner_errors)
    heard: list[str] = []
    try:

        async def hear(msg: Msg) -> None:
            heard.append(NS.logical(msg.subject))

        await owner.subscribe(NS.wire(remove), cb=hear)
        await owner.flush()
        outcomes: dict[tuple[str, str], str] = {}
        for identity, as_whom in ((READER, CLI), (CLI, READER), (READER, READER), (CLI, CLI)):
            errors: list[str] = []
            nc = await connect_as(stack, identity, errors)
            subject = NS.wire(subjects.ops_request(as_whom, "inventory", "fleet.remove"))
            try:
                await nc.publish(subject, b"{}")
                await settled(nc, errors, "Publish")
                denied = refused(errors, "Publish", subject)
                outcomes[(identity, as_whom)] = "refused" if denied else "sent"
            finally:
                await nc.close()

        async def both_heard() -> bool:
            return len(heard) == 2

        await until(both_heard, "the owner hearing the two requests it may hear")
        rogue_errors: list[str] = []
        rogue = await connect_as(stack, "planner", rogue_errors)
        try:
            await rogue.subscribe(NS.wire(remove))
            await settled(rogue, rogue_errors, "Subscription")
        finally:
            await rogue.close()
    finally:
        await owner.close()
    assert outcomes == {
        (READER, CLI): "refused",
        (CLI, READER): "refused",
        (READER, READER): "sent",
        (CLI, CLI): "sent",
    }
    assert sorted(heard) == [
        subjects.ops_request(CLI, "inventory", "fleet.remove"),
        subjects.ops_request(READER, "inventory", "fleet.remove"),
    ]
    assert refused(rogue_errors, "Subscription", NS.wire(remove))
    assert owner_errors == []


async def test_no_party_but_admin_can_purge_a_stream_or_delete_a_consumer(stack: Stack) -> None:
    for identity in [*concrete()]:
        errors: list[str] = []
        nc = await connect_as(stack, identity, errors)
        try:
            for subject in (
                "$JS.API.STREAM.PURGE.LOCKSTEP_DLQ",
                "$JS.API.STREAM.DELETE.LOCKSTEP_DLQ",
                "$JS.API.CONSUMER.DELETE.LOCKSTEP_PINS.lockstep-inventory-pins",
            ):
                await nc.publish(subject, b"")
            await settled(nc, errors, "Publish")
        finally:
            await nc.close()
        assert (identity == ADMIN) == (len(errors) == 1), (identity, errors)


class ProbeSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="LOCKSTEP_PROBE_", extra="forbid")


async def test_a_service_may_not_change_a_live_streams_limits_and_says_so(
    stack: Stack, servers: Servers
) -> None:
    """The admin (``lockstep up``) provisions streams; a service configured with other limits
    stops with one line instead of changing them or timing out obscurely."""
    await provision_topology(stack.nats_client(ADMIN), NS, [])
    access = stack.nats_client("planner")
    common: dict[str, Any] = {
        "nats_url": ",".join(access.servers),
        "nats_user": access.user,
        "nats_password_file": access.password_file,
        "nats_ca_file": access.ca_file,
        "database_url": servers.database_url,
        "db_schema": f"probe{uuid.uuid4().hex[:8]}",
        "log_json": False,
    }
    refused = ServiceApp("probe", ProbeSettings(**common, stream_max_bytes={"DRIFT": 128 << 20}))
    with pytest.raises(ConfigurationError, match=r"LOCKSTEP_DRIFT.*may not change a live stream"):
        await refused.start()
    same = ServiceApp("probe", ProbeSettings(**common))
    await same.start()
    try:
        assert same.readiness()["nats"]
    finally:
        await same.stop()


async def test_a_service_may_not_create_its_own_consumer_and_says_so(
    stack: Stack, servers: Servers
) -> None:
    """A durable the admin did not provision is not created by the service (it could make it a
    push consumer delivering anywhere): the start stops with one line naming it."""
    await provision_topology(stack.nats_client(ADMIN), NS, [])
    access = stack.nats_client("attest")
    settings = ProbeSettings(
        nats_url=",".join(access.servers),
        nats_user=access.user,
        nats_password_file=access.password_file,
        nats_ca_file=access.ca_file,
        database_url=servers.database_url,
        db_schema=f"probe{uuid.uuid4().hex[:8]}",
        log_json=False,
    )
    [bundles] = subscriptions_by_service()["attest"][:1]
    app = ServiceApp("attest", settings, subscriptions=[bundles])
    with pytest.raises(ConfigurationError, match=r"consumer .* may not create it"):
        await app.start()
    await provision_topology(stack.nats_client(ADMIN), NS, [app])
    await app.start()
    try:
        assert app.readiness()["consumers"]
    finally:
        await app.stop()
