"""``lockstep dlq`` against a real service's dead letters (attest's, real NATS + PostgreSQL),
which the service answers over the bus: the CLI has no reachable database here."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from typer.testing import CliRunner

from lockstep_attest.app import create_app
from lockstep_attest.settings import Settings
from lockstep_cli.main import app as cli_app
from lockstep_cli.polling import until
from lockstep_common import subjects
from lockstep_common.envelope import EventData, make_envelope
from lockstep_common.events import REGISTRY
from lockstep_common.events.v1 import (
    DlqListAnswered,
    DlqListRequested,
    DlqPurgeRequested,
    OpsRefused,
)
from lockstep_common.identities import READER
from lockstep_common.service import ServiceApp
from lockstep_common.vocabulary import GateVerdict
from tests.support import scalar

pytestmark = pytest.mark.integration
POISON = b'{"type": "lockstep.bundle.submitted", "schemaversion": 7}'


@pytest.fixture
async def attest(servers: Any, namespace: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    settings = Settings(
        nats_url=servers.nats_url,
        database_url=servers.database_url,
        namespace=namespace,
        db_schema=f"{namespace}_attest",
        consumer_fetch_timeout_s=0.2,
        relay_poll_s=0.2,
        log_json=False,
    )
    service = create_app(settings)
    await service.start()
    for name, value in (
        ("LOCKSTEP_NATS_URL", servers.nats_url),
        # Nothing listens there: the commands ask the service over the bus, never the table.
        ("LOCKSTEP_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none"),
        ("LOCKSTEP_NAMESPACE", namespace),
        ("LOCKSTEP_ATTEST_DB_SCHEMA", f"{namespace}_attest"),
    ):
        monkeypatch.setenv(name, value)
    yield service
    await service.stop()


async def _letters(service: ServiceApp) -> int:
    return int(await scalar(service.require().pool, "SELECT count(*) FROM dead_letters") or 0)


async def _cli(*args: str) -> tuple[int, str]:
    result = await asyncio.to_thread(CliRunner().invoke, cli_app, list(args))
    return result.exit_code, result.output


async def test_list_show_replay_and_purge_a_dead_letter(attest: ServiceApp) -> None:
    js = attest.require().js
    await js.publish(attest.namespace.wire(subjects.bundle_submitted()), POISON)
    await until(lambda: _eq(_letters(attest), 1), "the poison dead-lettered")

    code, out = await _cli("dlq", "list", "attest", "--json")
    assert code == 0, out
    [row] = json.loads(out)
    assert row["subject"] == "bundle.submitted" and row["error_kind"] == "InvalidMessage"
    assert "unknown schema version 7" in row["reason"]

    code, out = await _cli("dlq", "show", "attest", str(row["id"]))
    assert code == 0, out
    assert json.loads(out)["payload"] == POISON.decode()

    # Replayed on its subject, it fails the same way: a new row, from a new stream sequence.
    code, out = await _cli("dlq", "replay", "attest", str(row["id"]))
    assert code == 0, out
    assert "replayed dead letter" in out
    await until(lambda: _eq(_letters(attest), 1), "the replay dead-lettered again")
    code, out = await _cli("dlq", "list", "attest", "--json")
    [again] = json.loads(out)
    assert again["id"] != row["id"] and again["stream_seq"] > row["stream_seq"]

    code, out = await _cli("dlq", "purge", "attest", "--id", str(again["id"]))
    assert (code, await _letters(attest)) == (0, 0), out
    code, out = await _cli("dlq", "purge", "attest", "--older-than-days", "0")
    assert code == 1 and "purged 0" in out  # nothing left: says so, exit 1


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("dlq", "list", "nosuch"), "unknown service 'nosuch'"),
        (("dlq", "show", "attest", "999999"), "has no dead letter 999999"),
        (("dlq", "purge", "attest"), "give --id (repeatable) or --older-than-days"),
    ],
)
async def test_bad_input_is_one_line(attest: ServiceApp, args: tuple[str, ...], says: str) -> None:
    code, out = await _cli(*args)
    assert code in (1, 2) and says in out and "Traceback" not in out


async def _eq(value: Any, expected: Any) -> bool:
    return bool(await value == expected)


async def test_replay_refuses_a_subject_the_service_does_not_consume(attest: ServiceApp) -> None:
    """The dead-letter table is the service's own: a row naming another party's subject (a
    forged gate verdict) is not published with the administrator's rights."""
    letter = await scalar(
        attest.require().pool,
        "INSERT INTO dead_letters (consumer, stream, stream_seq, subject, error_kind, deliveries,"
        " reason, payload, detected_by) VALUES ('x', 'LOCKSTEP_GATES', 1, $1, 'InvalidMessage',"
        " 1, 'x', $2, 'consumer') RETURNING id",
        subjects.gate(GateVerdict.PASSED, "r1"),
        b"{}",
    )
    code, out = await _cli("dlq", "replay", "attest", str(letter))
    assert code == 1 and "which attest does not consume: not replayed" in out
    assert await _letters(attest) == 1  # kept, for the operator to look at


async def test_the_reader_lists_dead_letters_but_may_not_purge_them(attest: ServiceApp) -> None:
    js = attest.require().js
    await js.publish(attest.namespace.wire(subjects.bundle_submitted()), POISON)
    await until(lambda: _eq(_letters(attest), 1), "the poison dead-lettered")
    nc = attest.require().nc

    async def ask(identity: str, command: str, data: EventData) -> EventData:
        subject = attest.namespace.wire(subjects.ops_request(identity, "attest", command))
        reply = await nc.request(subject, make_envelope(data, source="/t").to_json(), timeout=10)
        return REGISTRY.decode(reply.data, max_bytes=1 << 22).data

    listed = await ask(READER, "dlq.list", DlqListRequested())
    assert isinstance(listed, DlqListAnswered) and len(listed.letters) == 1
    letter = listed.letters[0].id
    refused = await ask(READER, "dlq.purge", DlqPurgeRequested(ids=(letter,)))
    assert isinstance(refused, OpsRefused) and refused.kind == "forbidden"
    assert await _letters(attest) == 1
    row = await attest.require().pool.fetchrow("SELECT identity, outcome FROM operator_requests")
    assert row is not None and (row["identity"], row["outcome"]) == (READER, "refused")
