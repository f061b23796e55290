"""The CLI's standard-library NATS request (``fleet admit``'s quick path) against a nats-server
configured as ``lockstep up`` configures it: TLS verified against the stack's CA, one identity
per party, each allowed only what it declares. It gets the answer as the ``cli`` identity, and
is refused, not answered, whenever nats-py would be."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from nats.aio.msg import Msg

from lockstep_cli import admit_quick, nats_request
from lockstep_cli.catalog import bus_permissions
from lockstep_common import natsconn, subjects
from lockstep_common.identities import CLI
from lockstep_common.natsconn import NatsAccess
from lockstep_common.subjects import Namespace
from lockstep_devstack import Stack
from tests.conftest import Servers

pytestmark = pytest.mark.integration

NS = Namespace("lockstep")
SUBJECT = NS.wire(subjects.admission_check())
ANSWER = (
    b'{"specversion":"1.0","id":"9f8f2dc4-362b-469e-a98f-4bcd10ae7363","source":"/lockstep/'
    b'inventory","type":"lockstep.admission.check.answered","schemaversion":1,"time":"2026-11-'
    b'25T00:14:48.602407Z","datacontenttype":"application/json","data":{"stack_hash":"'
    + b"a" * 64
    + b'","nodes":[{"node_id":"n1","admitted":false,"reasons":["stale"]}]}}'
)


@pytest.fixture(scope="module")
def stack(servers: Servers) -> Iterator[Stack]:
    data_dir = Path(tempfile.mkdtemp(prefix="lockstep-natsreq-"))
    try:
        with Stack(
            data_dir, database_url=servers.database_url, durable=False, access=bus_permissions(NS)
        ) as st:
            yield st
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


async def ask(access: NatsAccess, timeout_s: float = 5.0) -> nats_request.Reply:
    """The blocking request in a thread, while this loop runs the test's responder."""
    body = admit_quick.request_body("a" * 64, ["n1"], now=dt.datetime.now(dt.UTC))
    assert body is not None
    return await asyncio.to_thread(
        nats_request.request, access, SUBJECT, body, timeout_s, name="lockstep-cli"
    )


async def test_the_cli_identity_gets_the_inventorys_reply_over_tls(stack: Stack) -> None:
    assert stack.nats is not None
    seen: list[dict[str, object]] = []
    nc = await natsconn.connect(stack.nats.client("inventory"), name="test-inventory")

    async def answer(msg: Msg) -> None:
        seen.append(json.loads(msg.data))
        await msg.respond(ANSWER)

    sub = await nc.subscribe(SUBJECT, cb=answer)
    try:
        await nc.flush()
        access = stack.nats.client(CLI)
        assert access.ca_file is not None and access.servers[0].startswith("tls://")
        reply = await ask(access)
        # Headers too (HMSG): the service marks a refusal with Lockstep-Error.
        nc_headers = {"Lockstep-Error": "too many"}
        await sub.unsubscribe()

        async def refuse(msg: Msg) -> None:
            await nc.publish(msg.reply, b'{"error": "too many"}', headers=nc_headers)

        sub = await nc.subscribe(SUBJECT, cb=refuse)
        await nc.flush()
        refused = await ask(access)
    finally:
        await sub.unsubscribe()
        await nc.close()
    assert reply.data == ANSWER
    assert seen[0]["type"] == "lockstep.admission.check.requested"
    assert admit_quick.answer_doc(reply.data, None)["nodes"][0]["reasons"] == ["stale"]
    assert refused.headers["Lockstep-Error"] == "too many"
    with pytest.raises(admit_quick.ServiceRefused, match="too many"):
        admit_quick.answer_doc(refused.data, refused.headers.get("Lockstep-Error"))


async def test_nobody_answering_is_no_responders_not_a_wait(stack: Stack) -> None:
    assert stack.nats is not None
    with pytest.raises(nats_request.NoResponders):
        await ask(stack.nats.client(CLI), timeout_s=30)


async def test_a_wrong_password_or_an_unknown_ca_is_refused(stack: Stack, tmp_path: Path) -> None:
    assert stack.nats is not None
    good = stack.nats.client(CLI)
    wrong = tmp_path / "pw"
    wrong.write_text("not-the-password\n")
    wrong.chmod(0o600)
    with pytest.raises(nats_request.Unreachable, match="Authorization Violation"):
        await ask(NatsAccess(good.servers, CLI, wrong, good.ca_file))
    # Another CA (the system's): the server's certificate does not verify.
    with pytest.raises(nats_request.Unreachable, match="CERTIFICATE_VERIFY_FAILED"):
        await ask(NatsAccess(good.servers, CLI, good.password_file, None))
    # Without TLS at all (nats://): the server still requires it, and its CA is not given.
    plain = (good.servers[0].replace("tls://", "nats://"),)
    with pytest.raises(nats_request.Unreachable):
        await ask(NatsAccess(plain, CLI, good.password_file, None))


async def test_an_identity_may_not_publish_an_admission_check_it_does_not_declare(
    stack: Stack,
) -> None:
    # The reader identity declares no admission check: the server refuses the publish.
    assert stack.nats is not None
    with pytest.raises(nats_request.Refused, match="Permissions Violation"):
        await ask(stack.nats.client("reader"))
