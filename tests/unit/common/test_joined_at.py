"""``JoinedAt``: a handler ``(tx, env, *, now)`` run in the consumer runtime's transaction gets
the unit of work built on the runtime's connection and context, and ``now`` from the one clock,
read at each delivery (not when the subscriptions were built)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest

from lockstep_common.clock import ManualClock
from lockstep_common.consumer import HandlerContext
from lockstep_common.db import Conn
from lockstep_common.envelope import Envelope, make_envelope, source_of
from lockstep_common.events.v1 import BundleSubmitted
from lockstep_common.stores import JoinedAt

pytestmark = pytest.mark.unit
T0 = datetime(2026, 3, 1, tzinfo=UTC)
CONN = cast(Conn, object())  # never used: the unit of work only carries it


@dataclass
class Tx:
    conn: Conn
    ctx: HandlerContext


def submitted() -> Envelope[BundleSubmitted]:
    data = BundleSubmitted(bundle_uri="file:///bundles/b1", submitted_by="ci")
    return make_envelope(data, source=source_of("cli"))


def context(*envs: Envelope[Any]) -> HandlerContext:
    sequences = {env.event_id: i + 1 for i, env in enumerate(envs)}
    return HandlerContext(CONN, source_of("test"), "test-consumer", sequences)


async def test_a_handler_gets_the_runtime_transaction_and_the_clocks_now() -> None:
    clock = ManualClock(T0)
    seen: list[tuple[Tx, uuid.UUID, datetime]] = []

    async def handler(tx: Tx, env: Envelope[BundleSubmitted], *, now: datetime) -> None:
        seen.append((tx, env.event_id, now))

    joined = JoinedAt(Tx, clock)
    run = joined(handler)
    first, second = submitted(), submitted()
    ctx = context(first, second)
    await run(ctx, first)
    clock.advance(90)
    await run(ctx, second)
    assert [(tx.conn, tx.ctx, event, now) for tx, event, now in seen] == [
        (CONN, ctx, first.event_id, T0),
        (CONN, ctx, second.event_id, T0 + timedelta(seconds=90)),
    ]
    assert seen[0][0].ctx.stream_seq(second) == 2  # the context is the runtime's own
    assert run.__name__ == "handler"  # named as the handler, in logs


async def test_a_batch_handler_gets_the_whole_batch_at_one_now() -> None:
    clock = ManualClock(T0)
    seen: list[tuple[int, datetime]] = []

    async def handler(tx: Tx, envs: Sequence[Envelope[BundleSubmitted]], *, now: datetime) -> None:
        seen.append((len(envs), now))

    envs = [submitted(), submitted(), submitted()]
    await JoinedAt(Tx, clock).batch(handler)(context(*envs), envs)
    assert seen == [(3, T0)]
