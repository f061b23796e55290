"""``lockstep bench ingest``: node reports/s through the inventory service, and report -> drift.

Two phases per run, each run in a fresh namespace and schema:

1. Throughput. ``nodes`` nodes are registered, pinned to a stack and have reported once (not
   timed). With the service stopped, ``reports`` further agent reports are published (round
   robin over the nodes, sequences increasing, ``changed`` of them flipping the node's kernel
   in or out of drift). Then, in the same run on the same stored messages:

   - the baseline: a plain nats-py pull consumer on a fresh durable fetching the same batch
     size, decoding each envelope (``REGISTRY.decode``) and acking it;
   - ours: the inventory service is started and timed until its durable's ack floor reaches the
     last report (parse, diff, commit observations/history/drift/outbox, ack; the relay
     publishes the drift events meanwhile).

   ``ratio`` = ours / baseline. The stored state is then checked against what was published
   (every node's last sequence, every drifted node), so a fast wrong run fails loudly.

2. Latency. With the service running, reports are published at ``rate`` per second for
   ``duration`` seconds; ``changed`` of them move a conforming node's kernel off the pin. For
   each of those the time from just before its publish to its ``drift.detected`` arriving from
   the namespace's DRIFT stream (an ordered push consumer) is recorded. Messages are built
   before the clock starts, so the publisher costs little on the shared event loop.

The service runs in this process (one event loop with the bench); medians over ``runs``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import math
import random
import statistics
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

import nats
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from lockstep_cli.polling import until
from lockstep_cli.scratch import drop_namespace
from lockstep_common import canonical, subjects
from lockstep_common.envelope import make_envelope
from lockstep_common.events import REGISTRY
from lockstep_common.events.v1 import PinChanged, ScopeSelector
from lockstep_common.provenance import source_for
from lockstep_common.service import ServiceApp
from lockstep_common.subjects import Namespace
from lockstep_inventory.adapters import registry, state
from lockstep_inventory.app import create_app
from lockstep_inventory.domain.fleet_file import NodeEntry
from lockstep_inventory.settings import Settings
from lockstep_sim.agents.reports import components, inventory_event
from lockstep_sim.agents.software import SoftwareState, initial_state

SITE = "bench-site"
PROFILE = "gb200"
GOLDEN = initial_state("580.65.06")
DRIFTED = replace(GOLDEN, kernel="6.8.0-99-generic")  # kernel off the pin: "unexpected" drift
MAX_BYTES = 1 << 20
POLL_S = 0.02


@dataclass(frozen=True)
class IngestOptions:
    """What one benchmark measures (the CLI's flags)."""

    nodes: int = 12_500
    reports: int = 50_000
    rate: float = 1_250.0
    duration_s: float = 8.0
    changed: float = 0.02
    batch: int = 256
    runs: int = 3
    seed: int = 1


@dataclass
class RunResult:
    """One run's figures and the checks of what was applied."""

    seconds: float
    reports_per_s: float
    raw_reports_per_s: float
    latencies_ms: list[float]
    expected_detections: int
    checks: dict[str, int] = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        """Ours over raw."""
        return self.reports_per_s / self.raw_reports_per_s


@dataclass
class Fleet:
    """What the bench's agents last reported per node (to generate and to check)."""

    ids: list[str]
    sequence: dict[str, int]
    drifted: set[str] = field(default_factory=set)
    rounds: int = 0

    def body(self, node_id: str, now: dt.datetime) -> tuple[str, bytes, str]:
        """The next report of ``node_id`` (its current state): subject, body, message id."""
        self.sequence[node_id] += 1
        sw: SoftwareState = DRIFTED if node_id in self.drifted else GOLDEN
        report = inventory_event(node_id, SITE, sw, self.sequence[node_id], now)
        env = make_envelope(report, source=source_for(report))
        return subjects.inventory_observed(SITE, node_id), env.to_json(), str(env.event_id)


def _nodes(n: int) -> list[NodeEntry]:
    return [
        NodeEntry(
            id=f"node-{i:05d}",
            bmc_url="http://127.0.0.1:9",
            profile=PROFILE,
            site=SITE,
            credentials="env:LOCKSTEP_BENCH_BMC",
        )
        for i in range(n)
    ]


def _settings(nats_url: str, database_url: str, namespace: str, batch: int) -> Settings:
    return Settings(
        nats_url=nats_url,
        database_url=database_url,
        namespace=namespace,
        db_schema=f"{namespace}_inventory",
        sweep_interval_s=0,
        consumer_batch=batch,
        consumer_fetch_timeout_s=0.2,
        relay_poll_s=0.2,
        shutdown_grace_s=10,
        log_json=False,
        log_level="WARNING",
    )


async def publish_all(
    js: JetStreamContext, ns: Namespace, msgs: list[tuple[str, bytes, str]]
) -> int:
    """Pipelined publish; the stream sequence of the last message."""
    futures = [
        await js.publish_async(ns.wire(subject), body, headers={"Nats-Msg-Id": msg_id})
        for subject, body, msg_id in msgs
    ]
    await js.publish_async_completed()
    return max(int(f.result().seq) for f in futures)


async def caught_up(js: JetStreamContext, stream: str, durable: str, last_seq: int) -> bool:
    info = await js.consumer_info(stream, durable)
    return (
        info.ack_floor is not None
        and (info.ack_floor.stream_seq or 0) >= last_seq
        and not info.num_ack_pending
    )


async def raw_baseline(
    js: JetStreamContext, stream: str, filter_subject: str, first_seq: int, count: int, batch: int
) -> float:
    """Fresh durable from ``first_seq``: fetch(batch) + decode + ack of ``count`` reports/s."""
    durable = f"bench-raw-{uuid.uuid4().hex[:8]}"
    await js.add_consumer(
        stream,
        ConsumerConfig(
            durable_name=durable,
            ack_policy=AckPolicy.EXPLICIT,
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=first_seq,
            filter_subject=filter_subject,
            max_ack_pending=-1,
        ),
    )
    psub = await js.pull_subscribe_bind(durable=durable, stream=stream)
    try:
        seen = 0
        started = time.perf_counter()
        while seen < count:
            try:
                msgs = await psub.fetch(batch, timeout=1.0)
            except nats.errors.TimeoutError:
                continue
            for m in msgs:
                REGISTRY.decode(m.data, max_bytes=MAX_BYTES)
                await m.ack()
            seen += len(msgs)
        await until(
            lambda: caught_up(js, stream, durable, first_seq + count - 1),
            timeout_s=60,
            what="raw acks",
            poll_s=POLL_S,
        )
        return count / (time.perf_counter() - started)
    finally:
        await psub.unsubscribe()
        await js.delete_consumer(stream, durable)


async def _pin(nc: NatsClient, ns: Namespace, app: ServiceApp) -> None:
    stack = {PROFILE: {str(c): v for c, v in components(GOLDEN).items()}}
    stack_hash = canonical.stack_hash(stack)
    env = make_envelope(
        PinChanged(
            site=SITE,
            scope=ScopeSelector(),
            stack_hash=stack_hash,
            stack={PROFILE: components(GOLDEN)},
        ),
        source=source_for(PinChanged),
    )
    await nc.jetstream().publish(
        ns.wire(subjects.pin_changed(SITE)),
        env.to_json(),
        headers={"Nats-Msg-Id": str(env.event_id)},
    )

    async def pinned() -> bool:
        async with app.require().pool.acquire() as conn:
            return any(p.stack_hash == stack_hash for p in await state.pins(conn))

    await until(pinned, timeout_s=30, what="the pin", poll_s=POLL_S)


async def _check(app: ServiceApp, fleet: Fleet) -> dict[str, int]:
    """Compare the stored state with what the agents reported; raise on any difference."""
    pool = app.require().pool
    rows = await pool.fetch("SELECT node_id, sequence FROM observations WHERE source = 'agent'")
    stored = {r["node_id"]: r["sequence"] for r in rows}
    drifted = {
        r["node_id"]
        for r in await pool.fetch("SELECT node_id FROM drift WHERE jsonb_array_length(items) > 0")
    }
    wrong = sum(1 for n in fleet.ids if stored.get(n) != fleet.sequence[n])
    if wrong or drifted != fleet.drifted:
        raise RuntimeError(
            f"bench ingest: state differs from the reports: {wrong} node(s) with a wrong "
            f"sequence; drifted {len(drifted)} stored vs {len(fleet.drifted)} reported"
        )
    return {"nodes_applied": len(stored), "drifted": len(drifted)}


async def one_run(nats_url: str, database_url: str, opts: IngestOptions, run: int) -> RunResult:
    """Both phases in a fresh namespace; the namespace is removed afterwards."""
    namespace = f"bi{uuid.uuid4().hex[:8]}"
    ns = Namespace(namespace)
    settings = _settings(nats_url, database_url, namespace, opts.batch)
    telemetry = ns.stream("TELEMETRY")
    durable = ns.durable("inventory-telemetry")
    rng = random.Random(f"{opts.seed}:{run}")  # noqa: S311 - workload shape only
    nodes = _nodes(opts.nodes)
    fleet = Fleet([n.id for n in nodes], {n.id: 0 for n in nodes})
    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    app = create_app(settings)
    try:
        # Set-up (not timed): registry, pin, one report per node.
        await app.start()
        async with app.require().pool.acquire() as conn:
            await registry.import_nodes(conn, nodes)
        await _pin(nc, ns, app)
        now = dt.datetime.now(dt.UTC)
        last = await publish_all(js, ns, [fleet.body(n, now) for n in fleet.ids])
        await until(
            lambda: caught_up(js, telemetry, durable, last),
            timeout_s=max(60.0, opts.nodes / 100),
            what="the first reports",
            poll_s=POLL_S,
        )
        await app.stop()

        # Throughput: the same stored reports through the raw consumer, then the service.
        msgs = []
        now = dt.datetime.now(dt.UTC)
        for i in range(opts.reports):
            node_id = fleet.ids[i % opts.nodes]
            if rng.random() < opts.changed:
                fleet.drifted ^= {node_id}
            msgs.append(fleet.body(node_id, now))
        last = await publish_all(js, ns, msgs)
        first = last - opts.reports + 1
        raw = await raw_baseline(
            js,
            telemetry,
            ns.wire(subjects.inventory_observed_all()),
            first,
            opts.reports,
            opts.batch,
        )
        app = create_app(settings)
        await app.start()
        started = time.perf_counter()
        await until(
            lambda: caught_up(js, telemetry, durable, last),
            timeout_s=max(120.0, opts.reports / 50),
            what="the inventory consumer",
            poll_s=POLL_S,
        )
        seconds = time.perf_counter() - started
        checks = await _check(app, fleet)

        # Latency: a fixed rate; changed reports move conforming nodes into drift.
        latencies, expected = await _latency_phase(nc, ns, fleet, opts, rng)
        checks.update(await _check(app, fleet))
        return RunResult(seconds, opts.reports / seconds, raw, latencies, expected, checks)
    finally:
        await app.stop()
        await nc.close()
        await drop_namespace(nats_url, database_url, namespace)


async def _latency_phase(
    nc: NatsClient, ns: Namespace, fleet: Fleet, opts: IngestOptions, rng: random.Random
) -> tuple[list[float], int]:
    js = nc.jetstream()
    total = max(1, round(opts.rate * opts.duration_s))
    conforming = [n for n in fleet.ids if n not in fleet.drifted]
    rng.shuffle(conforming)
    plan: list[tuple[str, bytes, str, str | None]] = []
    now = dt.datetime.now(dt.UTC)
    for i in range(total):
        node_id = fleet.ids[(fleet.rounds + i) % opts.nodes]
        marked: str | None = None
        if rng.random() < opts.changed and conforming:
            node_id = conforming.pop()
            fleet.drifted.add(node_id)
            marked = node_id
        subject, body, msg_id = fleet.body(node_id, now)
        plan.append((subject, body, msg_id, marked))
    fleet.rounds += total
    published: dict[str, float] = {}
    latencies: list[float] = []
    expected = sum(1 for *_, m in plan if m is not None)
    all_seen = asyncio.Event()

    async def on_drift(msg: Msg) -> None:
        received = time.perf_counter()
        data = json.loads(msg.data)
        if data.get("type", "").endswith("drift.detected"):
            sent = published.pop(data["data"]["node_id"], None)
            if sent is not None:
                latencies.append((received - sent) * 1000)
                if len(latencies) == expected:
                    all_seen.set()

    sub = await js.subscribe(
        ns.wire("drift.>"),
        cb=on_drift,
        ordered_consumer=True,
        deliver_policy=DeliverPolicy.NEW,
    )
    try:
        wire = [(ns.wire(s), b, {"Nats-Msg-Id": m}, marked) for s, b, m, marked in plan]
        started = time.perf_counter()
        for i, (subject, body, headers, marked) in enumerate(wire):
            due = started + i / opts.rate
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            if marked is not None:
                published[marked] = time.perf_counter()
            await js.publish_async(subject, body, headers=headers)
        await js.publish_async_completed()
        if expected:
            await asyncio.wait_for(all_seen.wait(), timeout=60)
    finally:
        await sub.unsubscribe()
    await until(
        lambda: _no_pending(js, ns),
        timeout_s=60,
        what="the consumer after the latency phase",
        poll_s=POLL_S,
    )
    return latencies, expected


async def _no_pending(js: JetStreamContext, ns: Namespace) -> bool:
    info = await js.consumer_info(ns.stream("TELEMETRY"), ns.durable("inventory-telemetry"))
    return not info.num_pending and not info.num_ack_pending


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (a real sample, no interpolation); None without samples."""
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))], 1)


def median_of(values: list[float | None]) -> float | None:
    """The median of the runs that produced a figure (None when none did)."""
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 3) if present else None


async def run_bench(nats_url: str, database_url: str, opts: IngestOptions) -> dict[str, Any]:
    """``opts.runs`` runs; medians and per-run figures."""
    results = [await one_run(nats_url, database_url, opts, run) for run in range(opts.runs)]
    per_run: list[dict[str, Any]] = [
        {
            "seconds": round(r.seconds, 3),
            "reports_per_s": round(r.reports_per_s, 1),
            "raw_reports_per_s": round(r.raw_reports_per_s, 1),
            "ratio": round(r.ratio, 3),
            "p50_ms": percentile(r.latencies_ms, 0.50),
            "p95_ms": percentile(r.latencies_ms, 0.95),
            "p99_ms": percentile(r.latencies_ms, 0.99),
            "max_ms": percentile(r.latencies_ms, 1.0),
            "detections": len(r.latencies_ms),
            "expected_detections": r.expected_detections,
            **r.checks,
        }
        for r in results
    ]

    def median(key: str) -> float | None:
        return median_of([p[key] for p in per_run])

    return {
        "nodes": opts.nodes,
        "reports": opts.reports,
        "rate": opts.rate,
        "duration_s": opts.duration_s,
        "changed": opts.changed,
        "batch": opts.batch,
        "runs": opts.runs,
        "seconds": median("seconds"),
        "reports_per_s": median("reports_per_s"),
        "raw_reports_per_s": median("raw_reports_per_s"),
        "ratio": median("ratio"),
        "p50_ms": median("p50_ms"),
        "p95_ms": median("p95_ms"),
        "p99_ms": median("p99_ms"),
        "max_ms": median("max_ms"),
        "per_run": per_run,
    }
