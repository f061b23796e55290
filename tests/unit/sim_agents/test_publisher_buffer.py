"""AgentFleet's local buffer against a fake JetStream that can be switched off: reports wait
while NATS is away, are re-sent with the same Msg-Id, and the oldest go first when it fills."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import nats.errors
import pytest
from nats.js.api import PubAck

from lockstep_common.subjects import Namespace
from lockstep_sim.agents.publisher import AgentFleet, FleetConfig

pytestmark = pytest.mark.unit


class SwitchedJetStream:
    """Stores and acknowledges every publish while up; refuses them while down; while silent
    takes them and never answers (a lost ack). A Msg-Id seen before is acknowledged as a
    duplicate and not stored again (the duplicate window)."""

    def __init__(self) -> None:
        self.up = True
        self.silent = False
        self.stored: dict[str, bytes] = {}
        self.attempts: list[str] = []

    async def publish_async(
        self, subject: str, payload: bytes, headers: dict[str, str]
    ) -> asyncio.Future[PubAck]:
        msg_id = headers["Nats-Msg-Id"]
        self.attempts.append(msg_id)
        if not self.up:
            raise nats.errors.ConnectionClosedError
        fut: asyncio.Future[PubAck] = asyncio.get_running_loop().create_future()
        if self.silent:
            return fut
        duplicate = msg_id in self.stored
        self.stored.setdefault(msg_id, payload)
        fut.set_result(PubAck(stream="T", seq=len(self.stored), duplicate=duplicate))
        return fut


def fleet(js: SwitchedJetStream, **overrides: Any) -> AgentFleet:
    config = FleetConfig(**({"nodes": 2} | overrides))
    return AgentFleet(js, Namespace("t"), config)  # type: ignore[arg-type]


def sequences(js: SwitchedJetStream) -> list[int]:
    """Inventory sequences stored, in the order they were stored."""
    docs = [json.loads(p)["data"] for p in js.stored.values()]
    return [d["sequence"] for d in docs if "sequence" in d]


async def test_reports_wait_out_an_outage_and_are_stored_once() -> None:
    js = SwitchedJetStream()
    f = fleet(js)
    assert await f.publish_cycle()
    js.up = False
    assert not await f.publish_cycle()
    assert not await f.publish_cycle()
    assert f.buffered == 2 * 2 * 2  # two cycles of two nodes' inventory and health
    js.up = True
    assert await f.publish_cycle()
    assert f.buffered == 0
    assert sorted(sequences(js)) == [1, 1, 2, 2, 3, 3, 4, 4]
    assert f.stats.reports == 2 * 4
    assert f.stats.dropped == 0
    assert f.stats.failed_cycles == 2


async def test_a_retry_carries_the_same_msg_id_and_a_stored_one_is_not_stored_twice() -> None:
    js = SwitchedJetStream()
    f = fleet(js, nodes=1, ack_timeout_s=0.1)
    js.silent = True  # the server takes the reports and the acks never come back
    assert not await f.publish_cycle()
    ids = list(js.attempts)
    assert len(ids) == f.buffered == 2
    js.stored[ids[0]] = b"stored before its ack got lost"
    js.silent = False
    assert await f.publish_buffer()
    assert js.attempts == ids + ids  # sent again, with the same Msg-Ids
    assert f.stats.retried == 2
    assert f.stats.duplicates == 1  # the one already stored was not stored twice
    assert js.stored[ids[0]] == b"stored before its ack got lost"


async def test_a_full_buffer_drops_the_oldest_reports_and_counts_them() -> None:
    js = SwitchedJetStream()
    js.up = False
    f = fleet(js, buffer_cycles=2)
    for _ in range(5):
        f.sample_cycle()
    assert f.buffered == f.buffer_limit == 2 * 2 * 2
    assert f.stats.dropped == 3 * 2 * 2
    js.up = True
    assert await f.publish_buffer()
    assert sorted(sequences(js)) == [4, 4, 5, 5]  # the newest cycles were kept


def test_buffer_must_hold_a_cycle() -> None:
    with pytest.raises(ValueError, match="buffer_cycles"):
        FleetConfig(buffer_cycles=0)
