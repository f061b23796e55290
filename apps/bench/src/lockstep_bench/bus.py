"""``lockstep bench bus``: events/s through outbox -> relay -> JetStream -> inbox consumer.

In the same run, on the same server, the baseline: raw nats-py JetStream (pipelined publish with
``Nats-Msg-Id``, batched pull, ack) moving the same number of the same bytes. Both are timed
from the first write to the last message settled; the ratio is ours / raw, per run, and the
reported figures are medians over the runs (these machines are noisy: compare ratios).
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from dataclasses import dataclass
from typing import Any

import nats
from nats.js.api import AckPolicy, ConsumerConfig, StreamConfig
from pydantic_settings import SettingsConfigDict

from lockstep_cli.scratch import drop_namespace
from lockstep_common import subjects
from lockstep_common.consumer import HandlerContext, On, Subscription
from lockstep_common.envelope import Envelope, make_envelope
from lockstep_common.events.v1 import BundleSubmitted
from lockstep_common.outbox import OutboxMessage, enqueue
from lockstep_common.provenance import source_for
from lockstep_common.service import ServiceApp
from lockstep_common.settings import ServiceSettings

PRODUCER_TX_ROWS = 100  # events committed per producer transaction (a sweep writes in batches)


class BenchSettings(ServiceSettings):
    """Settings of the benchmark's in-process producer and consumer."""

    model_config = SettingsConfigDict(
        env_prefix="LOCKSTEP_BENCH_", extra="forbid", populate_by_name=True
    )


@dataclass(frozen=True)
class RunResult:
    """One run's throughputs."""

    events_per_s: float
    baseline_per_s: float

    @property
    def ratio(self) -> float:
        """Ours over raw."""
        return self.events_per_s / self.baseline_per_s


def _payloads(n: int) -> list[tuple[uuid.UUID, bytes]]:
    out = []
    for i in range(n):
        env = make_envelope(
            BundleSubmitted(bundle_uri=f"file:///bench/{i}.tar", submitted_by="bench"),
            source=source_for(BundleSubmitted),
        )
        out.append((env.event_id, env.to_json()))
    return out


async def raw_baseline(nats_url: str, payloads: list[tuple[uuid.UUID, bytes]]) -> float:
    """Raw nats-py: pipelined publish + batched pull + ack of the same messages (msgs/s)."""
    name = f"BENCHRAW_{uuid.uuid4().hex[:8].upper()}"
    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    try:
        await js.add_stream(StreamConfig(name=name, subjects=[f"{name}.x"], duplicate_window=600))
        await js.add_consumer(name, ConsumerConfig(durable_name="c", ack_policy=AckPolicy.EXPLICIT))
        psub = await js.pull_subscribe_bind(durable="c", stream=name)
        total = len(payloads)

        async def produce() -> None:
            for event_id, body in payloads:
                await js.publish_async(f"{name}.x", body, headers={"Nats-Msg-Id": str(event_id)})
            await js.publish_async_completed()

        async def consume() -> None:
            seen = 0
            while seen < total:
                try:
                    msgs = await psub.fetch(256, timeout=1.0)
                except nats.errors.TimeoutError:
                    continue
                for m in msgs:
                    await m.ack()
                seen += len(msgs)
            await nc.flush()

        started = time.perf_counter()
        await asyncio.gather(produce(), consume())
        return total / (time.perf_counter() - started)
    finally:
        await js.delete_stream(name)
        await nc.close()


async def lockstep_pipeline(
    nats_url: str, database_url: str, payloads: list[tuple[uuid.UUID, bytes]]
) -> float:
    """Our path: outbox rows committed in batches, relayed, consumed with the inbox (events/s)."""
    namespace = f"bench{uuid.uuid4().hex[:8]}"
    total = len(payloads)
    done = asyncio.Event()
    applied = 0

    async def handle(ctx: HandlerContext, env: Envelope[BundleSubmitted]) -> None:
        nonlocal applied
        applied += 1
        if applied == total:
            done.set()

    common: dict[str, Any] = {
        "nats_url": nats_url,
        "database_url": database_url,
        "namespace": namespace,
        "log_json": False,
    }
    producer = ServiceApp("producer", BenchSettings(db_schema=f"{namespace}_p", **common))
    consumer = ServiceApp(
        "consumer",
        BenchSettings(db_schema=f"{namespace}_c", **common),
        subscriptions=[
            Subscription(
                "bench",
                "BUNDLES",
                (subjects.bundle_submitted(),),
                handlers=(On(BundleSubmitted, handle),),
            )
        ],
    )
    await producer.start()
    await consumer.start()
    try:
        pool = producer.require().pool
        subject = subjects.bundle_submitted()
        started = time.perf_counter()
        for i in range(0, total, PRODUCER_TX_ROWS):
            chunk = payloads[i : i + PRODUCER_TX_ROWS]
            # Rows of bytes serialised before the clock started, as the baseline publishes
            # them: the figure is the bus's, not envelope building's.
            async with pool.acquire() as conn, conn.transaction():
                await enqueue(conn, [OutboxMessage(eid, subject, body) for eid, body in chunk])
        await asyncio.wait_for(done.wait(), timeout=max(60.0, total / 200))
        return total / (time.perf_counter() - started)
    finally:
        await consumer.stop()
        await producer.stop()
        await drop_namespace(nats_url, database_url, namespace)


async def run_bench(nats_url: str, database_url: str, events: int, runs: int) -> dict[str, Any]:
    """Alternate baseline and pipeline ``runs`` times; medians and per-run figures."""
    results = []
    for _ in range(runs):
        payloads = _payloads(events)
        baseline = await raw_baseline(nats_url, payloads)
        ours = await lockstep_pipeline(nats_url, database_url, _payloads(events))
        results.append(RunResult(ours, baseline))
    return {
        "events": events,
        "runs": runs,
        "events_per_s": round(statistics.median(r.events_per_s for r in results), 1),
        "baseline_per_s": round(statistics.median(r.baseline_per_s for r in results), 1),
        "ratio": round(statistics.median(r.ratio for r in results), 3),
        "per_run": [
            {
                "events_per_s": round(r.events_per_s, 1),
                "baseline_per_s": round(r.baseline_per_s, 1),
                "ratio": round(r.ratio, 3),
            }
            for r in results
        ],
    }
