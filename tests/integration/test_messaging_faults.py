"""Messaging faults on one real nats-server and PostgreSQL (reliability.md 7, family A):

- A5, the relay killed between JetStream's PubAck and the ``published_at`` update: a retry
  inside the duplicate window is acknowledged as a duplicate (counted, not stored); after the
  window the copy is stored and the consumer's inbox drops it (0 extra effects).
- A7, a MaxAckPending stall: a handler blocks until the consumer holds ``max_ack_pending``
  unacknowledged deliveries; the stall detector (``lockstep_common.consumer_watch``) reports it
  within two of its polls, nothing is lost, and delivery resumes once the handler is released.

A1-A3 need a cluster: ``test_cluster_faults.py``; A4 ``test_broker_amnesia.py``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import nats
import pytest

from lockstep_cli.polling import until
from lockstep_common.consumer import HandlerContext, On, Subscription
from lockstep_common.envelope import Envelope, make_envelope
from lockstep_common.events.v1 import BundleSubmitted
from lockstep_common.provenance import source_for
from lockstep_common.relay import OutboxRelay
from lockstep_common.service import ServiceApp
from tests.integration.test_messaging import (
    SUBJECT,
    CrashAfterPublish,
    Effects,
    applied,
    consumer_app,
    over_applied,
    pool,
    stream_count,
    submitted,
)
from tests.support import emit, make_app, scalar

pytestmark = pytest.mark.integration

# A5: a window of seconds, not the deployment's 10 minutes, so the test can outlive it; the
# settings require it to exceed the relay's retry horizon, shortened with it.
WINDOW: dict[str, Any] = {"duplicate_window_s": 2.0, "relay_retry_horizon_s": 1.0}


def sample(app: ServiceApp, name: str, **labels: str) -> float:
    """What ``app``'s registry renders for ``name`` (0 when it has no such sample yet)."""
    return app.metrics.registry.get_sample_value(name, labels) or 0.0


async def unpublished(app: ServiceApp) -> int:
    return int(await scalar(pool(app), "SELECT count(*) FROM outbox WHERE published_at IS NULL"))


async def test_a5_relay_retry_is_a_counted_duplicate_inside_the_window_and_dropped_after(
    servers: Any, namespace: str
) -> None:
    producer = make_app(servers, namespace, "producer", **WINDOW)
    await producer.start()
    live = producer.require()
    relay = producer.relay
    assert relay is not None
    relay.stop()  # this test drives the relays by hand
    await asyncio.wait_for(live.tasks[0], timeout=10)  # tasks[0] is the relay loop
    effects = Effects()
    consumer = await consumer_app(servers, namespace, effects, **WINDOW)

    def relay_again() -> OutboxRelay:
        return OutboxRelay(live.pool, live.js, producer.namespace, relay.config, producer.metrics)

    def crashing() -> CrashAfterPublish:
        return CrashAfterPublish(
            live.pool, live.js, producer.namespace, relay.config, producer.metrics
        )

    try:
        # Inside the window: 20 events published, the relay dies before marking them.
        await emit(producer, SUBJECT, [submitted(i) for i in range(20)])
        with pytest.raises(ConnectionResetError):
            await crashing().relay_once()
        assert await unpublished(producer) == 20
        assert await stream_count(producer, "BUNDLES") == 20
        assert await relay_again().relay_once() == 20
        assert await unpublished(producer) == 0
        assert sample(producer, "lockstep_outbox_duplicates_total") == 20
        assert await stream_count(producer, "BUNDLES") == 20, "a retried publish was stored"

        # After the window: 10 more, the relay dies again and comes back too late to be
        # recognised: JetStream stores the copies and only the consumer's inbox stands between
        # them and a second effect.
        await emit(producer, SUBJECT, [submitted(i) for i in range(20, 30)])
        with pytest.raises(ConnectionResetError):
            await crashing().relay_once()
        published_at = time.monotonic()
        # The outage itself (the window has to pass), not a wait for a result.
        await asyncio.sleep(WINDOW["duplicate_window_s"] + 1.0)
        assert time.monotonic() - published_at > WINDOW["duplicate_window_s"]
        assert await relay_again().relay_once() == 10
        assert sample(producer, "lockstep_outbox_duplicates_total") == 20
        assert await stream_count(producer, "BUNDLES") == 40

        durable = consumer.namespace.durable(effects.subscription().name)
        await until(
            lambda: _at_least(
                sample(consumer, "lockstep_messages_total", consumer=durable, outcome="duplicate"),
                10,
            ),
            "the 10 stored copies met the inbox",
        )
        assert await applied(consumer) == 30
        assert await over_applied(consumer) == 0
        inbox = await scalar(pool(consumer), "SELECT count(*) FROM inbox")
        assert inbox == 30
    finally:
        await consumer.stop()
        await producer.stop()


async def _at_least(value: float, floor: float) -> bool:
    return value >= floor


class Blocking:
    """A consumer whose handler waits for ``release`` while ``blocked`` (the stalled dependency)
    and records every event it applied, per event id."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.applied: dict[str, int] = {}
        self.times: list[float] = []

    async def handle(self, ctx: HandlerContext, env: Envelope[BundleSubmitted]) -> None:
        await self.release.wait()
        key = str(env.event_id)
        self.applied[key] = self.applied.get(key, 0) + 1
        self.times.append(time.monotonic())

    def subscription(self) -> Subscription:
        return Subscription(
            name="test-stalls",
            stream="BUNDLES",
            subjects=(SUBJECT,),
            handlers=(On(BundleSubmitted, self.handle),),
        )


async def metrics_text(app: ServiceApp) -> str:
    """The service's /metrics page, as Prometheus scrapes it."""
    url = f"http://127.0.0.1:{app.require().http_port}/metrics"
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        assert resp.status == 200
        return await resp.text()


WATCH_S = 0.5  # the stall detector's poll (15 s by default)
MAX_ACK_PENDING = 8
BATCH = 4  # one batch blocked in the handler, one prefetched: 8 unacknowledged
EVENTS = 60


async def test_a7_max_ack_pending_stall_is_reported_within_two_polls_and_recovers(
    servers: Any, namespace: str
) -> None:
    consumer = Blocking()
    app = make_app(
        servers,
        namespace,
        "stalls",
        [consumer.subscription()],
        consumer_max_ack_pending=MAX_ACK_PENDING,
        consumer_batch=BATCH,
        consumer_watch_s=WATCH_S,
        # A blocked handler must not time out and retry while the test watches the stall.
        consumer_ack_wait_s=30.0,
        consumer_redelivery_backoff_s=(30.0, 60.0),
    )
    # The backlog is in the stream before the service starts, so its first pull takes a full
    # batch and its prefetch another: the limit is reached by the consumer's own pacing.
    nc = await nats.connect(servers.nats_url)
    try:
        await app.provision(nc.jetstream())
        wire = app.namespace.wire(SUBJECT)
        for i in range(EVENTS):
            env = make_envelope(submitted(i), source=source_for(BundleSubmitted))
            await nc.jetstream().publish(
                wire, env.to_json(), headers={"Nats-Msg-Id": str(env.event_id)}
            )
    finally:
        await nc.close()
    await app.start()
    try:
        live = app.require()
        durable = app.namespace.durable("test-stalls")
        stream = app.namespace.stream("BUNDLES")
        info = await live.js.consumer_info(stream, durable)
        assert info.config.max_ack_pending == MAX_ACK_PENDING

        async def at_limit() -> float | None:
            now = await live.js.consumer_info(stream, durable)
            return time.monotonic() if now.num_ack_pending == MAX_ACK_PENDING else None

        reached = await until(at_limit, "the consumer at MaxAckPending", timeout_s=20)

        async def reported() -> float | None:
            stalled = f'lockstep_consumer_stalled{{consumer="{durable}"}} 1.0'
            return time.monotonic() if stalled in await metrics_text(app) else None

        seen = await until(reported, "the stall on /metrics", timeout_s=20)
        assert seen - reached <= 2 * WATCH_S, f"reported {seen - reached:.2f}s after the stall"
        text = await metrics_text(app)
        assert f'lockstep_consumer_ack_pending{{consumer="{durable}"}} {MAX_ACK_PENDING}.0' in text
        assert (
            f'lockstep_consumer_max_ack_pending{{consumer="{durable}"}} {MAX_ACK_PENDING}.0' in text
        )
        assert not consumer.applied  # the handler is blocked: nothing went through
        # The stall lasts: the server delivers nothing more while the limit is held.
        still = await live.js.consumer_info(stream, durable)
        assert still.num_ack_pending == MAX_ACK_PENDING
        assert still.num_pending == EVENTS - MAX_ACK_PENDING

        released = time.monotonic()
        consumer.release.set()
        await until(
            lambda: _at_least(len(consumer.applied), EVENTS), "every event applied", timeout_s=30
        )
        took = consumer.times[-1] - released
        # Throughput recovers: the backlog drains in batches at once, not after AckWait (30 s)
        # or a redelivery.
        assert took < 10.0, f"{EVENTS} events took {took:.1f}s after the release"
        assert all(n == 1 for n in consumer.applied.values()), "an event applied twice"

        async def cleared() -> bool | None:
            stalled = f'lockstep_consumer_stalled{{consumer="{durable}"}} 0.0'
            return True if stalled in await metrics_text(app) else None

        await until(cleared, "the stall cleared on /metrics", timeout_s=10)
        done = await live.js.consumer_info(stream, durable)
        assert done.num_ack_pending == 0 and done.num_pending == 0
        assert await scalar(pool(app), "SELECT count(*) FROM inbox") == EVENTS
        assert await scalar(pool(app), "SELECT count(*) FROM dead_letters") == 0
    finally:
        consumer.release.set()
        await app.stop()
