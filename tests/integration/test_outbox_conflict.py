"""The outbox against PostgreSQL: an id taken by another event stops the transaction.

Issue 26: a row written first under an event's id made the genuine event vanish under
``ON CONFLICT (event_id) DO NOTHING``. The same event again stays a no-op."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest

from lockstep_common import subjects
from lockstep_common.events.v1 import GatePassed, GateTripped
from lockstep_common.outbox import OutboxConflict, emitting
from lockstep_common.service import ServiceApp
from lockstep_common.vocabulary import GateVerdict
from tests.support import make_app, scalar

pytestmark = pytest.mark.integration
AT = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)
TRIPPED = GateTripped(
    rollout_id="r1", wave=0, verdict=GateVerdict.TRIPPED, evidence=(), offending_nodes=("can-2",)
)
PASSED = GatePassed(rollout_id="r1", wave=0, verdict=GateVerdict.PASSED, evidence=())


@pytest.fixture
async def app(servers: Any, namespace: str) -> AsyncIterator[ServiceApp]:
    service = make_app(servers, namespace, "outbox")
    await service.start()
    async with service.require().pool.acquire() as conn:
        await conn.execute("CREATE TABLE decided (rollout_id text PRIMARY KEY)")
    try:
        yield service
    finally:
        await service.stop()


async def decide(app: ServiceApp, event_id: uuid.UUID) -> int:
    """The state change and its gate.tripped, in one transaction (as the healthgate does)."""
    async with app.require().pool.acquire() as conn, emitting(conn, app.source) as out:
        await conn.execute("INSERT INTO decided VALUES ('r1') ON CONFLICT DO NOTHING")
        out.emit(
            subjects.gate(GateVerdict.TRIPPED, "r1"), TRIPPED, event_id=event_id, occurred_at=AT
        )
        return await out.flush()


async def test_an_id_taken_by_another_event_stops_the_transaction(app: ServiceApp) -> None:
    pool = app.require().pool
    taken = uuid.uuid4()
    async with pool.acquire() as conn, emitting(conn, "/lockstep/intruder") as out:
        out.emit(subjects.gate(GateVerdict.PASSED, "r1"), PASSED, event_id=taken)
    with pytest.raises(OutboxConflict, match=f"event id {taken} is already in the outbox"):
        await decide(app, taken)
    assert await scalar(pool, "SELECT count(*) FROM decided") == 0  # nothing of it committed
    subject = await scalar(pool, "SELECT subject FROM outbox WHERE event_id = $1", taken)
    assert subject == "gate.passed.r1"  # the intruder's row is left for an operator to see


async def test_the_same_event_again_is_a_no_op(app: ServiceApp) -> None:
    pool = app.require().pool
    event_id = uuid.uuid4()
    assert await decide(app, event_id) == 1
    assert await decide(app, event_id) == 0
    assert await scalar(pool, "SELECT count(*) FROM outbox WHERE event_id = $1", event_id) == 1
    assert await scalar(pool, "SELECT count(*) FROM decided") == 1
