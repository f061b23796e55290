"""AgentFleet against a fake JetStream that never acknowledges: bounded, prompt, no hang."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from nats.js.api import PubAck

from lockstep_cli.polling import until
from lockstep_common.subjects import Namespace
from lockstep_sim.agents.publisher import AgentFleet, FleetConfig

pytestmark = pytest.mark.unit


class SilentJetStream:
    """Accepts every publish and never acknowledges it (a server gone quiet)."""

    def __init__(self) -> None:
        self.published: list[tuple[str, dict[str, str]]] = []
        self.futures: list[asyncio.Future[PubAck]] = []

    async def publish_async(
        self, subject: str, payload: bytes, headers: dict[str, str]
    ) -> asyncio.Future[PubAck]:
        self.published.append((subject, headers))
        fut: asyncio.Future[PubAck] = asyncio.get_running_loop().create_future()
        self.futures.append(fut)
        return fut


def fleet(js: SilentJetStream, **overrides: Any) -> AgentFleet:
    values: dict[str, Any] = {"nodes": 10, "max_in_flight": 4, "ack_timeout_s": 0.3}
    config = FleetConfig(**(values | overrides))
    return AgentFleet(js, Namespace("t"), config)  # type: ignore[arg-type]


async def test_unacknowledged_cycle_fails_within_the_ack_timeout() -> None:
    js = SilentJetStream()
    f = fleet(js)
    started = time.monotonic()
    assert not await f.publish_cycle()
    assert time.monotonic() - started < 2.0
    assert len(js.published) == 4  # never more than max_in_flight outstanding
    assert all(fut.cancelled() for fut in js.futures)
    assert f.stats.failed_cycles == 1
    assert f.stats.errors == 5  # 4 unacknowledged + the publish that found no slot


async def test_stop_is_prompt_while_acks_hang() -> None:
    js = SilentJetStream()
    f = fleet(js, ack_timeout_s=30.0, stop_grace_s=0.2)
    f.start()

    async def published() -> bool:
        return len(js.published) >= 4

    await until(published, what="the fleet to publish", timeout_s=5)
    started = time.monotonic()
    await f.stop()
    assert time.monotonic() - started < 1.0


async def test_msg_id_header_is_the_event_id() -> None:
    js = SilentJetStream()
    f = fleet(js)
    await f.publish_cycle()
    subject, headers = js.published[0]
    assert subject == "t.telemetry.observed.inventory.site-a.node-00000"
    assert len(headers["Nats-Msg-Id"]) == 36


def test_config_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="time_scale"):
        FleetConfig(time_scale=0)
    with pytest.raises(ValueError, match="site"):
        FleetConfig(site="a.b")
