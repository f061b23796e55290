"""The messaging core against a real nats-server and PostgreSQL: outbox -> relay -> JetStream
-> consumer -> inbox, and every way it must not lose, duplicate or choke on a message."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import nats
import pytest
from nats.js.api import StreamConfig

from lockstep_cli.polling import until
from lockstep_common import provenance, subjects
from lockstep_common.consumer import HandlerContext, On, Subscription, retry_after
from lockstep_common.envelope import Envelope, EventData, make_envelope
from lockstep_common.errors import (
    ConfigurationError,
    PermanentError,
    TopologyMismatch,
    TransientError,
)
from lockstep_common.events.v1 import BundleAttested, BundleRejected, BundleSubmitted
from lockstep_common.provenance import source_for
from lockstep_common.relay import OutboxRelay
from lockstep_common.samples import samples
from lockstep_common.service import ServiceApp
from lockstep_common.topology import DAY, StreamPolicy, ensure_topology
from lockstep_common.vocabulary import GateVerdict
from lockstep_devstack import NatsServer
from tests.support import emit, make_app, scalar

pytestmark = pytest.mark.integration

SUBJECT = subjects.bundle_submitted()
samples_of = {type(s): s for s in samples()}


def submitted(i: int) -> BundleSubmitted:
    return BundleSubmitted(bundle_uri=f"file:///bundles/{i}.tar", submitted_by="test")


class Effects:
    """A consumer whose effect is counting, per event id, how often it was applied."""

    def __init__(self) -> None:
        self.failures: dict[str, list[BaseException]] = {}
        self.always: dict[str, BaseException] = {}

    def fail(self, uri: str, *errors: BaseException) -> None:
        """Raise these errors, one per attempt, for the event about ``uri``."""
        self.failures[uri] = list(errors)

    def fail_always(self, uri: str, error: BaseException) -> None:
        """Raise ``error`` on every attempt for the event about ``uri``."""
        self.always[uri] = error

    async def handle(self, ctx: HandlerContext, env: Envelope[BundleSubmitted]) -> None:
        uri = env.data.bundle_uri
        if uri in self.always:
            raise self.always[uri]
        queued = self.failures.get(uri)
        if queued:
            raise queued.pop(0)
        await ctx.conn.execute(
            "INSERT INTO effects (event_id, applied) VALUES ($1, 1)"
            " ON CONFLICT (event_id) DO UPDATE SET applied = effects.applied + 1",
            env.event_id,
        )

    def subscription(self, ignores: tuple[type[EventData], ...] = ()) -> Subscription:
        return Subscription(
            name="test-bundles",
            stream="BUNDLES",
            # An ignored class arrives on its own subject, which the consumer then hears too.
            subjects=(SUBJECT, *(provenance.subject_of(samples_of[c]) for c in ignores)),
            handlers=(On(BundleSubmitted, self.handle),),
            ignores=ignores,
        )


async def consumer_app(
    servers: Any,
    namespace: str,
    effects: Effects,
    *,
    ignores: tuple[type[EventData], ...] = (),
    **kw: Any,
) -> ServiceApp:
    app = make_app(servers, namespace, "consumer", [effects.subscription(ignores)], **kw)
    conn = await asyncpg.connect(servers.database_url)
    try:
        await conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{app.schema}"')
        await conn.execute(
            f'CREATE TABLE IF NOT EXISTS "{app.schema}".effects'
            " (event_id uuid PRIMARY KEY, applied int NOT NULL)"
        )
    finally:
        await conn.close()
    await app.start()
    return app


@asynccontextmanager
async def consuming(
    servers: Any, namespace: str, effects: Effects, **kw: Any
) -> AsyncIterator[ServiceApp]:
    """A started consumer service over ``effects``, stopped when the block ends."""
    app = await consumer_app(servers, namespace, effects, **kw)
    try:
        yield app
    finally:
        await app.stop()


def pool(app: ServiceApp) -> asyncpg.Pool:
    assert app.resources is not None
    return app.resources.pool


async def applied(app: ServiceApp) -> int:
    return int(await scalar(pool(app), "SELECT count(*) FROM effects") or 0)


async def over_applied(app: ServiceApp) -> int:
    return int(await scalar(pool(app), "SELECT count(*) FROM effects WHERE applied > 1") or 0)


async def stream_count(app: ServiceApp, base: str) -> int:
    assert app.resources is not None
    info = await app.resources.js.stream_info(app.namespace.stream(base))
    return int(info.state.messages)


async def test_event_travels_from_outbox_to_inbox_exactly_once(
    servers: Any, namespace: str
) -> None:
    producer = make_app(servers, namespace, "producer")
    await producer.start()
    effects = Effects()
    consumer = await consumer_app(servers, namespace, effects)
    try:
        await emit(producer, SUBJECT, [submitted(i) for i in range(300)])
        await until(lambda: _eq(applied(consumer), 300), "300 events applied")
        assert await over_applied(consumer) == 0
        assert await stream_count(producer, "BUNDLES") == 300
        unpublished = await scalar(
            pool(producer), "SELECT count(*) FROM outbox WHERE published_at IS NULL"
        )
        assert unpublished == 0
    finally:
        await consumer.stop()
        await producer.stop()


async def _eq(value: Any, expected: Any) -> bool:
    return bool(await value == expected)


class CrashAfterPublish(OutboxRelay):
    """A relay that dies after JetStream acknowledged the publishes, before marking them."""

    async def _publish(self, rows: list[asyncpg.Record]) -> Any:
        await super()._publish(rows)
        raise ConnectionResetError("relay killed between publish and mark")


async def test_relay_killed_between_publish_and_mark_loses_and_duplicates_nothing(
    servers: Any, namespace: str
) -> None:
    producer = make_app(servers, namespace, "producer")
    await producer.start()
    live = producer.require()
    relay = producer.relay
    assert relay is not None
    relay.stop()  # the service's own relay stands down; this test drives relays by hand
    await asyncio.wait_for(live.tasks[0], timeout=10)  # tasks[0] is the relay loop
    effects = Effects()
    consumer = await consumer_app(servers, namespace, effects)
    try:
        await emit(producer, SUBJECT, [submitted(i) for i in range(50)])
        crashing = CrashAfterPublish(
            live.pool, live.js, producer.namespace, relay.config, producer.metrics
        )
        with pytest.raises(ConnectionResetError):
            await crashing.relay_once()
        # Published but not marked: the restarted relay publishes all 50 again.
        assert (
            await scalar(pool(producer), "SELECT count(*) FROM outbox WHERE published_at IS NULL")
            == 50
        )
        restarted = OutboxRelay(
            live.pool, live.js, producer.namespace, relay.config, producer.metrics
        )
        assert await restarted.relay_once() == 50
        await until(lambda: _eq(applied(consumer), 50), "50 events applied")
        assert await stream_count(producer, "BUNDLES") == 50, "duplicate window dropped the copies"
        assert await over_applied(consumer) == 0
    finally:
        await consumer.stop()
        await producer.stop()


async def test_replayed_event_has_one_effect_even_past_the_duplicate_window(
    servers: Any, namespace: str
) -> None:
    effects = Effects()
    async with consuming(servers, namespace, effects) as consumer:
        assert consumer.resources is not None
        env = make_envelope(submitted(1), source=source_for(BundleSubmitted))
        js = consumer.resources.js
        wire = consumer.namespace.wire(SUBJECT)
        # Three copies that JetStream stores (distinct Nats-Msg-Id, as after the window expired).
        for n in range(3):
            await js.publish(wire, env.to_json(), headers={"Nats-Msg-Id": f"{env.event_id}-{n}"})
        await js.publish(
            wire, make_envelope(submitted(2), source=source_for(BundleSubmitted)).to_json()
        )
        await until(lambda: _eq(applied(consumer), 2), "both events applied")
        await until(lambda: _eq(inbox_size(consumer), 2), "inbox holds both ids")
        assert await over_applied(consumer) == 0
        assert await stream_count(consumer, "BUNDLES") == 4


async def inbox_size(app: ServiceApp) -> int:
    return int(await scalar(pool(app), "SELECT count(*) FROM inbox") or 0)


async def test_transient_error_is_redelivered_and_then_succeeds(
    servers: Any, namespace: str
) -> None:
    effects = Effects()
    effects.fail("file:///bundles/7.tar", TransientError("db busy"), TransientError("db busy"))
    consumer = await consumer_app(servers, namespace, effects)
    producer = make_app(servers, namespace, "producer")
    await producer.start()
    try:
        await emit(producer, SUBJECT, [submitted(i) for i in range(5, 10)])
        await until(lambda: _eq(applied(consumer), 5), "all five applied")
        assert await over_applied(consumer) == 0
        assert await scalar(pool(consumer), "SELECT count(*) FROM dead_letters") == 0
        assert effects.failures["file:///bundles/7.tar"] == []
    finally:
        await consumer.stop()
        await producer.stop()


async def test_exhausted_transient_error_reaches_the_dlq_with_its_delivery_count(
    servers: Any, namespace: str
) -> None:
    effects = Effects()
    effects.fail_always("file:///bundles/3.tar", TimeoutError("BMC timed out"))
    async with consuming(servers, namespace, effects) as consumer:
        await publish(consumer, [submitted(3), submitted(4)])
        await until(lambda: _eq(dead_letter_count(consumer), 1), "one dead letter")
        row = await dead_letter(consumer)
        assert row["deliveries"] == 4 and row["error_kind"] == "TimeoutError"
        assert "BMC timed out" in row["reason"]
        await until(lambda: _eq(applied(consumer), 1), "the other event applied")


class DeliveryClock(Effects):
    """Effects that also note when each delivery of an event reached the handler."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[str, list[float]] = {}

    async def handle(self, ctx: HandlerContext, env: Envelope[BundleSubmitted]) -> None:
        self.seen.setdefault(env.data.bundle_uri, []).append(time.monotonic())
        await super().handle(ctx, env)


async def test_transient_retries_wait_the_documented_nak_delays_not_the_redelivery_backoff(
    servers: Any, namespace: str
) -> None:
    """Issue 15: with a consumer BackOff, nats-server counted a nak's delay from AckWait against
    BackOff[delivery - 1] (1, 5, 15, 60 s became 1, 35, 105, 330 s). Each gap must be its nak
    delay, well below the next larger value of the schedule (the redelivery BackOff starts at
    5 s), so "nak delay honoured" and "BackOff or AckWait used" cannot be confused."""
    retry, redelivery = (0.3, 1.0, 2.0), (5.0, 10.0)
    effects = DeliveryClock()
    effects.fail_always("file:///bundles/5.tar", TransientError("BMC busy"))
    async with consuming(
        servers,
        namespace,
        effects,
        consumer_ack_wait_s=5.0,
        consumer_max_deliver=4,
        consumer_retry_backoff_s=retry,
        consumer_redelivery_backoff_s=redelivery,
    ) as consumer:
        await publish(consumer, [submitted(5)])
        await until(lambda: _eq(dead_letter_count(consumer), 1), "the last delivery")
        seen = effects.seen["file:///bundles/5.tar"]
        assert len(seen) == 4 and (await dead_letter(consumer))["deliveries"] == 4
        gaps = [later - earlier for earlier, later in itertools.pairwise(seen)]
        ceilings = (*retry[1:], redelivery[0])
        schedule = zip(gaps, retry, ceilings, strict=True)
        for delivery, (gap, delay, ceiling) in enumerate(schedule, start=1):
            assert delay <= gap < ceiling, (
                f"retry after delivery {delivery} came {gap:.2f}s later, nak delay {delay}s: "
                f"all gaps {[round(g, 2) for g in gaps]}"
            )


async def test_after_a_retry_a_message_never_acknowledged_follows_the_redelivery_backoff(
    servers: Any, namespace: str
) -> None:
    """The nak offset only moves the retry: a delivery that the consumer then never settles
    (a crash) is redelivered after its BackOff entry, as without the retry."""
    async with consuming(
        servers,
        namespace,
        Effects(),
        consumer_ack_wait_s=1.0,
        consumer_max_deliver=4,
        consumer_retry_backoff_s=(0.2,),
        consumer_redelivery_backoff_s=(1.0, 2.5),
    ) as consumer:
        assert consumer.resources is not None
        (runner,) = consumer._runners
        runner.stop()  # we pull with its durable from here on, settling as the runtime would
        await asyncio.gather(*consumer.resources.tasks[2:3], return_exceptions=True)
        await publish(consumer, [submitted(6)])
        psub = await consumer.resources.js.pull_subscribe_bind(
            durable=runner.durable, stream=runner.stream
        )
        (first,) = await psub.fetch(1, timeout=5)
        first_at = time.monotonic()
        await retry_after(consumer.resources.nc, first, runner.spec(), 0.2)
        (second,) = await psub.fetch(1, timeout=5)
        second_at = time.monotonic()  # and never settled: the consumer "crashed"
        (third,) = await psub.fetch(1, timeout=10)
        third_at = time.monotonic()
        assert [m.metadata.num_delivered for m in (first, second, third)] == [1, 2, 3]
        # The server times redeliveries from when it sent, we from when we received: allow
        # 0.1 s of that, still far from the other schedules (AckWait 1.0, BackOff[0] 1.0).
        assert 0.1 <= second_at - first_at < 1.0, "the retry waited for the BackOff"
        assert 2.4 <= third_at - second_at < 3.5, "not redelivered per BackOff[1]"


async def publish(app: ServiceApp, events: list[BundleSubmitted]) -> None:
    assert app.resources is not None
    for e in events:
        env = make_envelope(e, source=source_for(e))
        await app.resources.js.publish(
            app.namespace.wire(SUBJECT), env.to_json(), headers={"Nats-Msg-Id": str(env.event_id)}
        )


async def dead_letter_count(app: ServiceApp) -> int:
    return int(await scalar(pool(app), "SELECT count(*) FROM dead_letters") or 0)


async def dead_letter(app: ServiceApp) -> asyncpg.Record:
    async with pool(app).acquire() as conn:
        row = await conn.fetchrow("SELECT * FROM dead_letters ORDER BY id LIMIT 1")
    assert row is not None
    return row


async def test_permanent_error_reaches_the_dlq_while_the_consumer_serves_others(
    servers: Any, namespace: str
) -> None:
    effects = Effects()
    effects.fail_always(
        "file:///bundles/2.tar", PermanentError("bundle 2 names an unknown profile")
    )
    async with consuming(servers, namespace, effects) as consumer:
        await publish(consumer, [submitted(1), submitted(2), submitted(3)])
        await until(lambda: _eq(applied(consumer), 2), "the good events applied")
        await until(lambda: _eq(dead_letter_count(consumer), 1), "the bad one dead-lettered")
        row = await dead_letter(consumer)
        assert row["reason"] == "bundle 2 names an unknown profile"
        assert row["deliveries"] == 1 and row["detected_by"] == "consumer"
        assert row["subject"] == SUBJECT
        assert json.loads(row["payload"])["data"]["bundle_uri"] == "file:///bundles/2.tar"
        # The copy on dlq.<subject> carries the reason for operators subscribed to it.
        await until(lambda: _gt(stream_count(consumer, "DLQ"), 0), "dlq copy published")
        assert consumer.resources is not None
        msg = await consumer.resources.js.get_last_msg(
            consumer.namespace.stream("DLQ"), consumer.namespace.wire(subjects.dead_letter(SUBJECT))
        )
        assert msg.headers is not None
        assert msg.headers["Lockstep-Dlq-Reason"] == "bundle 2 names an unknown profile"
        assert msg.headers["Lockstep-Dlq-Deliveries"] == "1"


async def _gt(value: Any, floor: int) -> bool:
    return bool(await value > floor)


async def test_malformed_oversized_and_unknown_messages_are_dead_lettered_harmlessly(
    servers: Any, namespace: str
) -> None:
    effects = Effects()
    async with consuming(servers, namespace, effects, max_message_bytes=4096) as consumer:
        assert consumer.resources is not None
        good = json.loads(make_envelope(submitted(1), source=source_for(BundleSubmitted)).to_json())
        unknown_version = {**good, "id": str(uuid.uuid4()), "schemaversion": 99}
        unknown_type = {**good, "id": str(uuid.uuid4()), "type": "lockstep.bundle.exploded"}
        bad_field = {
            **good,
            "id": str(uuid.uuid4()),
            "data": {"bundle_uri": "", "submitted_by": "x"},
        }
        bodies = [
            b"\x00\xffnot json at all",
            b"[1, 2, 3]",
            json.dumps({**good, "id": str(uuid.uuid4()), "pad": "x" * 5000}).encode(),
            json.dumps(unknown_version).encode(),
            json.dumps(unknown_type).encode(),
            json.dumps(bad_field).encode(),
            json.dumps(good).encode(),
        ]
        for body in bodies:
            await consumer.resources.js.publish(consumer.namespace.wire(SUBJECT), body)
        await until(lambda: _eq(dead_letter_count(consumer), 6), "six dead letters")
        await until(lambda: _eq(applied(consumer), 1), "the good message applied")
        async with pool(consumer).acquire() as conn:
            rows = await conn.fetch(
                "SELECT reason, error_kind FROM dead_letters ORDER BY stream_seq"
            )
        reasons = [r["reason"] for r in rows]
        assert {r["error_kind"] for r in rows} == {"InvalidMessage"}
        assert "not JSON" in reasons[0]
        assert "not a JSON object" in reasons[1]
        assert "exceeds limit of 4096" in reasons[2]
        assert "unknown schema version 99" in reasons[3]
        assert "unknown event type 'lockstep.bundle.exploded'" in reasons[4]
        assert "data.bundle_uri" in reasons[5]


async def test_a_class_the_subscription_does_not_declare_is_refused_and_an_ignored_one_acked(
    servers: Any, namespace: str
) -> None:
    effects = Effects()
    async with consuming(servers, namespace, effects, ignores=(BundleRejected,)) as consumer:
        js = consumer.require().js
        ignored = BundleRejected(bundle_uri="file:///b.tar", bundle_id=None, checks=())
        undeclared = BundleAttested(
            bundle_id="b", bundle_version="1", stack_hash="0" * 64, checks=()
        )
        for data in (ignored, undeclared, submitted(1)):
            subject = SUBJECT if data is undeclared else provenance.subject_of(data)
            await js.publish(
                consumer.namespace.wire(subject),
                make_envelope(data, source=source_for(data)).to_json(),
            )
        await until(lambda: _eq(applied(consumer), 1), "the declared event applied")
        await until(lambda: _eq(dead_letter_count(consumer), 1), "one dead letter")
        letter = await dead_letter(consumer)
        assert "does not accept lockstep.bundle.attested" in letter["reason"]
        info = await js.consumer_info(
            consumer.namespace.stream("BUNDLES"), consumer.namespace.durable("test-bundles")
        )
        assert (info.num_pending, info.num_ack_pending) == (0, 0)  # the ignored one was acked


async def test_a_database_error_a_retry_would_repeat_is_dead_lettered_on_first_delivery(
    servers: Any, namespace: str
) -> None:
    effects = Effects()
    async with consuming(servers, namespace, effects) as consumer:
        async with pool(consumer).acquire() as conn:
            with pytest.raises(asyncpg.PostgresError) as raised:
                await conn.fetchval("SELECT $1::text", "a\x00b")  # PostgreSQL text has no NUL
        effects.fail_always("file:///bundles/2.tar", raised.value)
        await publish(consumer, [submitted(1), submitted(2), submitted(3)])
        await until(lambda: _eq(dead_letter_count(consumer), 1), "one dead letter")
        row = await dead_letter(consumer)
        assert row["deliveries"] == 1  # not retried max_deliver times first
        assert row["error_kind"] == type(raised.value).__name__
        await until(lambda: _eq(applied(consumer), 2), "the neighbours applied")


async def test_a_poison_body_in_a_batch_is_dead_lettered_and_its_neighbours_applied(
    servers: Any, namespace: str
) -> None:
    effects = Effects()
    async with consuming(servers, namespace, effects) as consumer:
        js = consumer.require().js
        wire = consumer.namespace.wire(SUBJECT)
        await publish(consumer, [submitted(1)])
        await js.publish(wire, b"[" * 20_000)  # 20 KB that once crashed the decoder
        await publish(consumer, [submitted(2), submitted(3)])
        await until(lambda: _eq(applied(consumer), 3), "every good event applied")
        await until(lambda: _eq(dead_letter_count(consumer), 1), "one dead letter")
        assert "nested too deeply" in (await dead_letter(consumer))["reason"]
        assert consumer.readiness()["started"]
        assert all(not t.done() for t in consumer.require().tasks)  # no loop died


async def test_the_dlq_copy_of_a_message_at_the_size_limit_is_published(
    servers: Any, namespace: str
) -> None:
    effects = Effects()
    async with consuming(servers, namespace, effects) as consumer:
        js = consumer.require().js
        # Just under the stream's 1 MiB limit: with the DLQ headers added, a whole copy would not
        # fit, and the relay would retry it forever.
        body = b"{" + b" " * (consumer.settings.stream_max_message_bytes - 200)
        await js.publish(consumer.namespace.wire(SUBJECT), body)
        await until(lambda: _eq(dead_letter_count(consumer), 1), "one dead letter")
        await until(lambda: _eq(unpublished(consumer), 0), "the dlq copy published")
        assert await failed_attempts(consumer) == 0
        info = await js.stream_info(consumer.namespace.stream("DLQ"))
        assert info.state.messages == 1


async def test_retention_purges_run_as_a_service_starts(servers: Any, namespace: str) -> None:
    app = make_app(servers, namespace, "producer")
    await app.start()
    await app.stop()
    schema, old = app.schema, "now() - interval '400 days'"
    conn = await asyncpg.connect(servers.database_url)
    try:
        await conn.execute(
            f'INSERT INTO "{schema}".outbox (event_id, subject, payload, published_at)'
            f" VALUES (gen_random_uuid(), 'x', ''::bytea, {old})"
        )
        await conn.execute(
            f'INSERT INTO "{schema}".inbox (consumer, event_id, received_at)'
            f" VALUES ('c', gen_random_uuid(), {old})"
        )
        await conn.execute(
            f'INSERT INTO "{schema}".dead_letters (consumer, stream, stream_seq, subject, reason,'
            " error_kind, deliveries, detected_by, failed_at)"
            f" VALUES ('c', 's', 1, 'x', 'r', 'k', 1, 'consumer', {old})"
        )
        await conn.execute(
            f'INSERT INTO "{schema}".operator_requests (request_id, identity, command, digest,'
            " request, outcome, reply, asked_at)"
            f" VALUES (gen_random_uuid(), 'cli', 'fleet.import', 'd', '{{}}', 'done', ''::bytea,"
            f" {old})"
        )
    finally:
        await conn.close()
    again = make_app(servers, namespace, "producer")
    await again.start()

    async def remaining() -> int:
        counts = [
            await scalar(pool(again), f"SELECT count(*) FROM {table}")
            for table in ("outbox", "inbox", "dead_letters", "operator_requests")
        ]
        return sum(counts)

    try:
        await until(lambda: _eq(remaining(), 0), "old rows purged as the service started")
    finally:
        await again.stop()


async def test_readiness_fails_when_a_consumer_is_deleted_under_the_service(
    servers: Any, namespace: str
) -> None:
    effects = Effects()
    async with consuming(servers, namespace, effects) as consumer:
        js = consumer.require().js
        assert all(consumer.readiness().values())
        await js.delete_consumer(
            consumer.namespace.stream("BUNDLES"), consumer.namespace.durable("test-bundles")
        )

        async def consumers_ready() -> bool:
            return consumer.readiness()["consumers"]

        await until(lambda: _eq(consumers_ready(), False), "readiness to report the lost consumer")
        assert consumer.readiness()["nats"]  # connected all along: only the consumer is gone


async def test_an_event_dated_beyond_the_clock_skew_is_refused(
    servers: Any, namespace: str
) -> None:
    effects = Effects()
    async with consuming(servers, namespace, effects, max_clock_skew_s=60.0) as consumer:
        js = consumer.require().js
        wire = consumer.namespace.wire(SUBJECT)
        soon = datetime.now(UTC) + timedelta(seconds=30)  # within the skew: a fast clock
        far = datetime(2999, 1, 1, tzinfo=UTC)
        for at, i in ((far, 1), (soon, 2)):
            env = make_envelope(submitted(i), source=source_for(BundleSubmitted), occurred_at=at)
            await js.publish(wire, env.to_json())
        await until(lambda: _eq(applied(consumer), 1), "the event within the skew applied")
        await until(lambda: _eq(dead_letter_count(consumer), 1), "the far-future one refused")
        assert (
            "in the future, beyond the allowed clock skew"
            in (await dead_letter(consumer))["reason"]
        )


async def test_a_handler_reads_the_stream_sequence_the_broker_gave_its_event(
    servers: Any, namespace: str
) -> None:
    seen: dict[str, int] = {}

    async def handle(ctx: HandlerContext, env: Envelope[BundleSubmitted]) -> None:
        seen[env.data.bundle_uri] = ctx.stream_seq(env)

    sub = Subscription(
        name="test-seq",
        stream="BUNDLES",
        subjects=(SUBJECT,),
        handlers=(On(BundleSubmitted, handle),),
    )
    app = make_app(servers, namespace, "seq", [sub])
    await app.start()
    try:
        js = app.require().js
        acks = {}
        for i in range(3):  # each dated earlier than the one before: only arrival counts
            at = datetime.now(UTC) - timedelta(minutes=i)
            env = make_envelope(submitted(i), source=source_for(BundleSubmitted), occurred_at=at)
            ack = await js.publish(app.namespace.wire(SUBJECT), env.to_json())
            acks[env.data.bundle_uri] = ack.seq

        async def all_handled() -> bool:
            return len(seen) == 3

        await until(all_handled, "three events handled")
        assert seen == acks and sorted(acks.values()) == [1, 2, 3]
    finally:
        await app.stop()


async def test_nats_restart_mid_stream_loses_no_acknowledged_event(
    servers: Any, namespace: str, tmp_path: Path
) -> None:
    own = NatsServer(tmp_path / "nats", sync_always=True)
    own.start()
    try:
        local = type("S", (), {"nats_url": own.url, "database_url": servers.database_url})()
        producer = make_app(local, namespace, "producer")
        await producer.start()
        effects = Effects()
        consumer = await consumer_app(local, namespace, effects)
        try:
            await emit(producer, SUBJECT, [submitted(i) for i in range(400)])
            await until(lambda: _gt(applied(consumer), 0), "consumption to start")
            own.kill()  # kill -9 mid-stream
            await emit(producer, SUBJECT, [submitted(i) for i in range(400, 800)])
            own.start()  # same port, same store
            await until(lambda: _eq(applied(consumer), 800), "all 800 applied", timeout_s=60)
            assert await over_applied(consumer) == 0
        finally:
            await consumer.stop()
            await producer.stop()
    finally:
        own.stop()


async def test_self_check_refuses_a_stream_configured_differently(
    servers: Any, namespace: str
) -> None:
    nc = await nats.connect(servers.nats_url)
    try:
        await nc.jetstream().add_stream(
            StreamConfig(
                name=f"{namespace.upper()}_DRIFT",
                subjects=[f"{namespace}.drift.>"],
                duplicate_window=1.0,
            )
        )
    finally:
        await nc.close()
    app = make_app(servers, namespace, "checker")
    with pytest.raises(TopologyMismatch) as err:
        await app.start()
    assert f"stream {namespace.upper()}_DRIFT: duplicate_window: declared 600.0, live 1.0" in str(
        err.value
    )
    assert app.resources is None


async def test_streams_get_the_configured_limits_and_a_restart_applies_changed_ones(
    servers: Any, namespace: str
) -> None:
    first = make_app(
        servers,
        namespace,
        "limits",
        stream_max_age_s={"TELEMETRY": 7200.0},
        stream_max_bytes={"PINS": 32 << 20},
    )
    await first.start()
    await first.stop()
    ns = first.namespace
    nc = await nats.connect(servers.nats_url)
    try:
        js = nc.jetstream()

        async def limits(base: str) -> tuple[float | None, int | None]:
            config = (await js.stream_info(ns.stream(base))).config
            return config.max_age, config.max_bytes

        assert await limits("TELEMETRY") == (7200.0, 1 << 30)
        assert await limits("PINS") == (30 * DAY, 32 << 20)
        assert await limits("DRIFT") == (30 * DAY, 256 << 20)  # the defaults
        assert await limits("ADVISORIES") == (7 * DAY, 64 << 20)
        # A bystander that only needs the streams (the simulator's agents) changes nothing.
        await ensure_topology(js, ns, StreamPolicy())
        assert await limits("PINS") == (30 * DAY, 32 << 20)

        second = make_app(servers, namespace, "limits", stream_max_bytes={"PINS": 64 << 20})
        await second.start()  # no TopologyMismatch: limits are settings
        await second.stop()
        assert await limits("PINS") == (30 * DAY, 64 << 20)
        assert await limits("TELEMETRY") == (1 * DAY, 1 << 30)  # back to its default
    finally:
        await nc.close()


async def test_a_full_stream_drops_its_oldest_messages_and_no_others(
    servers: Any, namespace: str
) -> None:
    # 16 KiB of GATES (the least allowed with 1 KiB messages): a flood of gate subjects fills
    # that stream only, never the server's store or another stream.
    app = make_app(
        servers,
        namespace,
        "limits",
        stream_max_message_bytes=1024,
        stream_max_bytes={"GATES": 16 << 10},
    )
    await app.start()
    try:
        js = app.require().js
        wire = app.namespace.wire(subjects.gate(GateVerdict.PASSED, "r1"))
        for i in range(100):
            await js.publish(wire, b"x" * 500, headers={"Nats-Msg-Id": f"flood-{i}"})
        await emit(app, SUBJECT, [submitted(1)])
        await until(lambda: _eq(stream_count(app, "BUNDLES"), 1), "the bundle event stored")
        state = (await js.stream_info(app.namespace.stream("GATES"))).state
        assert state.bytes <= 16 << 10 and state.last_seq == 100
        assert state.first_seq > 1 and state.messages == 101 - state.first_seq
    finally:
        await app.stop()


class SmallStoreNats(NatsServer):
    """A nats-server whose JetStream may store 64 MB in all."""

    def _write_config(self) -> Path:
        config = super()._write_config()
        text = config.read_text().replace("jetstream {", "jetstream {\n  max_file_store: 64MB", 1)
        config.write_text(text)
        return config


async def test_limits_the_server_cannot_reserve_refuse_the_start_with_one_line(
    servers: Any, namespace: str, tmp_path: Path
) -> None:
    own = SmallStoreNats(tmp_path / "nats")
    own.start()
    try:
        local = type("S", (), {"nats_url": own.url, "database_url": servers.database_url})()
        app = make_app(local, namespace, "limits")
        with pytest.raises(ConfigurationError) as err:
            await app.start()
        assert str(err.value).startswith(
            f"nats-server cannot reserve 268435456 bytes for stream {namespace.upper()}_BUNDLES"
        )
        assert "lower LOCKSTEP_STREAM_MAX_BYTES for it" in str(err.value)
        assert app.resources is None
    finally:
        own.stop()


async def test_self_check_refuses_a_consumer_configured_differently(
    servers: Any, namespace: str
) -> None:
    effects = Effects()
    first = await consumer_app(servers, namespace, effects)
    await first.stop()
    second = make_app(
        servers, namespace, "consumer", [effects.subscription()], consumer_max_deliver=9
    )
    with pytest.raises(TopologyMismatch, match="max_deliver: declared 9, live 4"):
        await second.start()


async def test_message_never_acknowledged_reaches_the_dlq_through_the_advisory(
    servers: Any, namespace: str
) -> None:
    """A consumer that crashes on every delivery never settles the message itself."""
    effects = Effects()
    async with consuming(
        servers,
        namespace,
        effects,
        consumer_ack_wait_s=1.0,
        consumer_max_deliver=2,
        consumer_redelivery_backoff_s=(1.0,),  # JetStream BackOff: redeliver after 1 s
    ) as consumer:
        assert consumer.resources is not None
        for runner in consumer._runners:
            runner.stop()  # stand in for the crashing process: pull with the durable, never ack
        await asyncio.gather(*consumer.resources.tasks[2:3], return_exceptions=True)
        await publish(consumer, [submitted(9)])
        js = consumer.resources.js
        psub = await js.pull_subscribe_bind(
            durable=consumer.namespace.durable("test-bundles"),
            stream=consumer.namespace.stream("BUNDLES"),
        )
        for attempt in (1, 2):
            (msg,) = await psub.fetch(1, timeout=5)
            assert msg.metadata.num_delivered == attempt
        # The restarted consumer pulls again: the server refuses a third delivery and, at that
        # moment, emits the MAX_DELIVERIES advisory.
        with pytest.raises(nats.errors.TimeoutError):
            await psub.fetch(1, timeout=2.5)
        await until(lambda: _eq(dead_letter_count(consumer), 1), "advisory recorded")
        row = await dead_letter(consumer)
        assert row["detected_by"] == "advisory" and row["error_kind"] == "MaxDeliveriesExceeded"
        assert row["deliveries"] == 2
        assert json.loads(row["payload"])["data"]["bundle_uri"] == "file:///bundles/9.tar"


async def test_graceful_stop_finishes_the_batch_in_flight(servers: Any, namespace: str) -> None:
    entered, release = asyncio.Event(), asyncio.Event()
    effects = Effects()
    original = effects.handle

    async def slow(ctx: HandlerContext, env: Envelope[BundleSubmitted]) -> None:
        entered.set()
        await release.wait()
        await original(ctx, env)

    effects.handle = slow  # type: ignore[method-assign]
    async with consuming(servers, namespace, effects) as consumer:
        await publish(consumer, [submitted(1)])
        await entered.wait()
        stopping = asyncio.create_task(consumer.stop())
        await asyncio.sleep(0)  # let stop() begin while the handler is mid-flight
        release.set()
        await stopping
    # Restart: the message was committed and acknowledged, so nothing is redelivered.
    again = await consumer_app(servers, namespace, Effects())
    try:
        assert await applied(again) == 1
        assert again.resources is not None
        info = await again.resources.js.consumer_info(
            again.namespace.stream("BUNDLES"), again.namespace.durable("test-bundles")
        )
        assert info.num_ack_pending == 0 and info.num_pending == 0
    finally:
        await again.stop()


async def test_relay_backs_off_while_nats_is_down_and_catches_up(
    servers: Any, namespace: str, tmp_path: Path
) -> None:
    own = NatsServer(tmp_path / "nats", sync_always=False)
    own.start()
    local = type("S", (), {"nats_url": own.url, "database_url": servers.database_url})()
    producer = make_app(local, namespace, "producer")
    await producer.start()
    try:
        own.kill()
        await emit(producer, SUBJECT, [submitted(i) for i in range(20)])
        await until(
            lambda: _gt(failed_attempts(producer), 0), "a failed relay attempt", timeout_s=30
        )
        attempts = await scalar(pool(producer), "SELECT max(attempts) FROM outbox")
        assert attempts <= 2, "the relay retried faster than its backoff allows"
        assert (
            await scalar(pool(producer), "SELECT count(*) FROM outbox WHERE last_error IS NULL")
            == 0
        )
        own.start()
        await until(lambda: _eq(unpublished(producer), 0), "the backlog published", timeout_s=60)
        assert await stream_count(producer, "BUNDLES") == 20
    finally:
        await producer.stop()
        own.stop()


async def failed_attempts(app: ServiceApp) -> int:
    return int(
        await scalar(
            pool(app), "SELECT count(*) FROM outbox WHERE attempts > 0 AND published_at IS NULL"
        )
        or 0
    )


async def unpublished(app: ServiceApp) -> int:
    return int(
        await scalar(pool(app), "SELECT count(*) FROM outbox WHERE published_at IS NULL") or 0
    )
