"""The inventory's operator commands over the bus (``lockstep_common.operator``), asked the way
the CLI asks them: who asked is the subject's identity, a reader only reads, a write is recorded
with its asker and runs once per request id, and every refusal is a typed reply."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from lockstep_common import subjects
from lockstep_common.envelope import EventData, make_envelope
from lockstep_common.events import REGISTRY
from lockstep_common.events.v1 import (
    FleetListAnswered,
    FleetListRequested,
    FleetRemoveAnswered,
    FleetRemoveRequested,
    FleetStatusAnswered,
    FleetStatusRequested,
    OpsRefused,
)
from lockstep_common.identities import CLI, READER, agent_identity
from tests.integration.inventory_service.conftest import Harness

pytestmark = pytest.mark.integration


def subject(h: Harness, identity: str, command: str) -> str:
    return h.ns.wire(subjects.ops_request(identity, "inventory", command))


async def ask_raw(h: Harness, identity: str, command: str, body: bytes) -> Any:
    return await h.nc.request(subject(h, identity, command), body, timeout=10)


async def ask(h: Harness, identity: str, command: str, request: EventData) -> EventData:
    reply = await ask_raw(h, identity, command, make_envelope(request, source="/t").to_json())
    return REGISTRY.decode(reply.data, max_bytes=1 << 22).data


async def registered(h: Harness) -> list[str]:
    rows = await h.app.require().pool.fetch("SELECT id FROM nodes ORDER BY id")
    return [r["id"] for r in rows]


async def audit(h: Harness) -> list[dict[str, Any]]:
    rows = await h.app.require().pool.fetch(
        "SELECT request_id, identity, command, outcome, reason, request FROM operator_requests"
        " ORDER BY asked_at"
    )
    return [{**dict(r), "request": json.loads(r["request"])} for r in rows]


async def test_the_reader_reads_but_its_write_is_refused_recorded_and_changes_nothing(
    harness: Harness,
) -> None:
    before = await registered(harness)
    status = await ask(harness, READER, "fleet.status", FleetStatusRequested())
    assert isinstance(status, FleetStatusAnswered) and status.fleet.nodes == len(before)

    request = FleetRemoveRequested(node_ids=(before[0],))
    env = make_envelope(request, source="/t")
    reply = await ask_raw(harness, READER, "fleet.remove", env.to_json())
    refused = REGISTRY.decode(reply.data, max_bytes=1 << 20)
    assert isinstance(refused.data, OpsRefused)
    assert refused.data.kind == "forbidden" and "may only read" in refused.data.reason
    assert refused.correlation_id == str(env.event_id)
    assert reply.headers and "may only read" in reply.headers["Lockstep-Error"]
    assert await registered(harness) == before
    [row] = await audit(harness)
    assert (row["identity"], row["command"], row["outcome"]) == (READER, "fleet.remove", "refused")
    assert row["request_id"] == env.event_id and row["request"]["node_ids"] == [before[0]]

    # Not an operator identity at all: nothing, read or write.
    other = await ask(harness, agent_identity("n1"), "fleet.status", FleetStatusRequested())
    assert isinstance(other, OpsRefused) and other.kind == "forbidden"
    assert "may not run operator commands" in other.reason


async def test_a_retried_write_gets_its_first_answer_and_runs_once(harness: Harness) -> None:
    first, second, *_ = await registered(harness)
    env = make_envelope(FleetRemoveRequested(node_ids=(first,)), source="/t")
    once = await ask_raw(harness, CLI, "fleet.remove", env.to_json())
    # The reply was lost, say: the CLI sends the same request again. Run twice, the second
    # would be refused (the node is gone); it gets the first answer instead.
    again = await ask_raw(harness, CLI, "fleet.remove", env.to_json())
    assert once.data == again.data
    answered = REGISTRY.decode(once.data, max_bytes=1 << 20).data
    assert isinstance(answered, FleetRemoveAnswered) and answered.removed == (first,)
    assert first not in await registered(harness)
    rows = await audit(harness)
    assert [(r["identity"], r["command"], r["outcome"]) for r in rows] == [
        (CLI, "fleet.remove", "done")
    ]

    # The same id for another request: refused, nothing changed.
    reused = env.model_copy(update={"data": FleetRemoveRequested(node_ids=(second,))})
    reply = await ask_raw(harness, CLI, "fleet.remove", reused.to_json())
    refused = REGISTRY.decode(reply.data, max_bytes=1 << 20).data
    assert isinstance(refused, OpsRefused) and refused.kind == "invalid"
    assert "already used for another request" in refused.reason
    assert second in await registered(harness)
    # ... and from another identity: not theirs to see.
    stolen = await ask_raw(harness, READER, "fleet.remove", env.to_json())
    assert isinstance(REGISTRY.decode(stolen.data, max_bytes=1 << 20).data, OpsRefused)
    assert stolen.data != once.data


async def test_copies_of_one_write_racing_run_it_once(harness: Harness) -> None:
    node = (await registered(harness))[-1]
    body = make_envelope(FleetRemoveRequested(node_ids=(node,)), source="/t").to_json()
    replies = await asyncio.gather(*(ask_raw(harness, CLI, "fleet.remove", body) for _ in range(4)))
    assert len({r.data for r in replies}) == 1
    assert isinstance(REGISTRY.decode(replies[0].data, max_bytes=1 << 20).data, FleetRemoveAnswered)
    assert len(await audit(harness)) == 1


async def test_an_unknown_node_is_refused_and_the_refusal_is_the_answer_to_a_retry(
    harness: Harness,
) -> None:
    before = await registered(harness)
    env = make_envelope(FleetRemoveRequested(node_ids=(before[0], "nope-9")), source="/t")
    first = await ask_raw(harness, CLI, "fleet.remove", env.to_json())
    refused = REGISTRY.decode(first.data, max_bytes=1 << 20).data
    assert isinstance(refused, OpsRefused) and refused.kind == "not_found"
    assert refused.reason == "not in the registry, nothing removed: nope-9"
    assert await registered(harness) == before  # all or nothing
    again = await ask_raw(harness, CLI, "fleet.remove", env.to_json())
    assert again.data == first.data
    assert [r["outcome"] for r in await audit(harness)] == ["refused"]


async def test_malformed_and_mismatched_requests_get_one_reason(harness: Harness) -> None:
    for body in (b"not json", b'{"type": "x"}', b"{" * 5000):
        reply = await ask_raw(harness, CLI, "fleet.remove", body)
        refused = REGISTRY.decode(reply.data, max_bytes=1 << 20).data
        assert isinstance(refused, OpsRefused) and refused.kind == "invalid", body[:20]
        assert reply.headers and reply.headers["Lockstep-Error"]
    # A status request sent as fleet.remove is not a removal.
    wrong = await ask(harness, CLI, "fleet.remove", FleetStatusRequested())
    assert isinstance(wrong, OpsRefused) and "expected ops.fleet.remove.requested" in wrong.reason
    assert await audit(harness) == []


async def test_the_registry_comes_a_page_at_a_time(harness: Harness) -> None:
    ids, after, sizes = [], None, []
    while True:
        page = await ask(harness, READER, "fleet.list", FleetListRequested(after=after, limit=3))
        assert isinstance(page, FleetListAnswered)
        ids += [n.id for n in page.nodes]
        sizes.append(len(page.nodes))
        if page.next_after is None:
            break
        after = page.next_after
    assert ids == await registered(harness) and sizes == [3, 1]
    assert all(n.credentials == "env:LOCKSTEP_TESTBMC" for n in page.nodes)
