"""``lockstep bench gate``, the parts that need the healthgate service (issue 11, parts a and c).

Each run is in a fresh namespace and schema, the service in this process (one event loop with
the bench), as ``bench ingest`` measures the inventory.

(a) Ingest. With the service stopped, ``reports`` health reports (round robin over ``nodes``
    nodes, every signal of the default policy) are published. Then, on the same stored messages:
    the baseline, a plain nats-py pull consumer on a fresh durable fetching the same batch size,
    decoding each envelope and acking it; and ours, the service started and timed until its
    durable's ack floor reaches the last report (map to signals, COPY into the day partition,
    the hard-rule pre-filter, commit, ack). ``ingest_ratio`` = ours / baseline, in reports/s;
    ``samples_per_s`` counts the signals stored. The stored report count is checked.

(c) Trip latency. ``trips`` waves (5 canary and 10 control nodes each, disjoint) are planned.
    With the service running, reports are published at ``rate`` per second (the design load:
    12,500 nodes every 10 s is 1,250/s) for ``duration_s``; ``trips`` of them, spread over the
    phase, carry a failed DCGM diagnostic from one canary node of a different wave. For each, the
    time from just before its publish to its ``gate.tripped`` arriving from the namespace's
    GATES stream (an ordered push consumer, so the outbox relay is included) is recorded;
    ``trip_p99_ms`` is the nearest-rank 99th percentile.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import nats
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy

from lockstep_bench.ingest import caught_up, median_of, percentile, publish_all, raw_baseline
from lockstep_cli.polling import until
from lockstep_cli.scratch import drop_namespace
from lockstep_common import subjects
from lockstep_common.envelope import EventData, make_envelope
from lockstep_common.provenance import source_for
from lockstep_common.service import ServiceApp
from lockstep_common.subjects import Namespace
from lockstep_gate.policy_files import default_policy
from lockstep_healthgate.app import create_app
from lockstep_healthgate.domain.signals import signals_of
from lockstep_healthgate.settings import Settings
from lockstep_healthgate.testing.reports import HEALTHY, Fault, report
from lockstep_healthgate.testing.waves import planned_wave

SITE = "bench-site"
POLL_S = 0.02
CANARY, CONTROL = 5, 10
DCGM_FAILED = Fault(dcgm_failed=True)


@dataclass(frozen=True)
class ServiceBenchOptions:
    """What to run."""

    nodes: int = 12_500
    reports: int = 50_000
    rate: float = 1_250.0
    duration_s: float = 10.0
    trips: int = 100
    batch: int = 256
    runs: int = 1
    seed: int = 0


def _settings(nats_url: str, database_url: str, namespace: str, batch: int) -> Settings:
    return Settings(
        nats_url=nats_url,
        database_url=database_url,
        namespace=namespace,
        db_schema=f"{namespace}_healthgate",
        consumer_batch=batch,
        consumer_fetch_timeout_s=0.2,
        relay_poll_s=0.2,
        shutdown_grace_s=10,
        log_json=False,
        log_level="WARNING",
    )


def _body(data: EventData, subject: str) -> tuple[str, bytes, str]:
    env = make_envelope(data, source=source_for(data))  # as its producer
    return subject, env.to_json(), str(env.event_id)


@dataclass
class RunResult:
    """One run's figures."""

    seconds: float
    reports_per_s: float
    raw_reports_per_s: float
    samples: int
    latencies_ms: list[float]
    expected_trips: int


async def _ingest_phase(
    app: ServiceApp, js: JetStreamContext, ns: Namespace, ids: list[str], opts: ServiceBenchOptions
) -> tuple[float, float, float, int]:
    rng = random.Random(opts.seed)  # noqa: S311 - synthetic readings, not secrets
    now = datetime.now(UTC)
    msgs = []
    samples = 0
    fatal = default_policy().hard_rules.fatal_xids
    rounds = math.ceil(opts.reports / len(ids))
    for i in range(opts.reports):
        node = ids[i % len(ids)]
        at = now - timedelta(seconds=10 * (rounds - i // len(ids)))  # every 10 s, up to now
        r = report(node, at, i // len(ids), rng, site=SITE)
        samples += len(signals_of(r, fatal))
        msgs.append(_body(r, subjects.health_observed(SITE, node)))
    last = await publish_all(js, ns, msgs)
    telemetry = ns.stream("TELEMETRY")
    raw = await raw_baseline(
        js,
        telemetry,
        ns.wire(subjects.health_observed_all()),
        last - opts.reports + 1,
        opts.reports,
        opts.batch,
    )
    await app.start()
    started = time.perf_counter()
    await until(
        lambda: caught_up(js, telemetry, ns.durable("healthgate-health"), last),
        timeout_s=max(120.0, opts.reports / 50),
        what="the healthgate consumer",
        poll_s=POLL_S,
    )
    seconds = time.perf_counter() - started
    stored = await app.require().pool.fetchval("SELECT count(*) FROM health_samples")
    if stored != opts.reports:  # one row per report
        raise RuntimeError(f"bench gate: {stored} reports stored, {opts.reports} published")
    return seconds, opts.reports / seconds, raw, samples


async def _trip_phase(
    app: ServiceApp, js: JetStreamContext, ns: Namespace, ids: list[str], opts: ServiceBenchOptions
) -> tuple[list[float], int]:
    rng = random.Random(opts.seed + 1)  # noqa: S311 - synthetic readings, not secrets
    size = CANARY + CONTROL
    trips = min(opts.trips, len(ids) // size)
    waves = [ids[i * size : (i + 1) * size] for i in range(trips)]
    plans = [
        _body(
            planned_wave(f"bench-{i}", w[:CANARY], w[CANARY:]), subjects.wave_planned(f"bench-{i}")
        )
        for i, w in enumerate(waves)
    ]
    await publish_all(js, ns, plans)

    async def planned() -> bool:
        n = await app.require().pool.fetchval("SELECT count(*) FROM waves")
        return bool(n == trips)

    await until(planned, timeout_s=60, what="the waves planned", poll_s=POLL_S)

    total = max(trips, round(opts.rate * opts.duration_s))
    marked_at = {round((k + 0.5) * total / trips): k for k in range(trips)} if trips else {}
    now = datetime.now(UTC)
    plan: list[tuple[str, bytes, str, str | None]] = []
    for i in range(total):
        rollout: str | None = None
        if i in marked_at:
            k = marked_at[i]
            node, fault, rollout = waves[k][0], DCGM_FAILED, f"bench-{k}"
        else:
            node, fault = ids[i % len(ids)], HEALTHY
        r = report(node, now, 1_000 + i, rng, site=SITE, fault=fault)
        subject, body, msg_id = _body(r, subjects.health_observed(SITE, node))
        plan.append((subject, body, msg_id, rollout))
    published: dict[str, float] = {}
    latencies: list[float] = []
    all_seen = asyncio.Event()

    async def on_gate(msg: Msg) -> None:
        received = time.perf_counter()
        data = json.loads(msg.data)
        if data.get("type", "").endswith("gate.tripped"):
            sent = published.pop(data["data"]["rollout_id"], None)
            if sent is not None:
                latencies.append((received - sent) * 1000)
                if len(latencies) == trips:
                    all_seen.set()

    sub = await js.subscribe(
        ns.wire("gate.>"), cb=on_gate, ordered_consumer=True, deliver_policy=DeliverPolicy.NEW
    )
    try:
        wire = [(ns.wire(s), b, {"Nats-Msg-Id": m}, rollout) for s, b, m, rollout in plan]
        started = time.perf_counter()
        for i, (subject, body, headers, rollout) in enumerate(wire):
            delay = started + i / opts.rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            if rollout is not None:
                published[rollout] = time.perf_counter()
            await js.publish_async(subject, body, headers=headers)
        await js.publish_async_completed()
        if trips:
            await asyncio.wait_for(all_seen.wait(), timeout=60)
    finally:
        await sub.unsubscribe()
    return latencies, trips


async def one_run(
    nats_url: str, database_url: str, opts: ServiceBenchOptions, run: int
) -> RunResult:
    """Both phases in a fresh namespace; the namespace is removed afterwards."""
    namespace = f"bg{uuid.uuid4().hex[:8]}"
    ns = Namespace(namespace)
    settings = _settings(nats_url, database_url, namespace, opts.batch)
    ids = [f"bench-{run}-{i:05d}" for i in range(opts.nodes)]
    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    # Started once to create the streams and the durable, then stopped: phase (a) times a
    # service that starts with every report already stored.
    app = create_app(settings)
    try:
        await app.start()
        await app.stop()
        app = create_app(settings)
        seconds, per_s, raw, samples = await _ingest_phase(app, js, ns, ids, opts)
        latencies, expected = await _trip_phase(app, js, ns, ids, opts)
        return RunResult(seconds, per_s, raw, samples, latencies, expected)
    finally:
        await app.stop()
        await nc.close()
        await drop_namespace(nats_url, database_url, namespace)


async def run_service_bench(
    nats_url: str, database_url: str, opts: ServiceBenchOptions
) -> dict[str, Any]:
    """``opts.runs`` runs; medians, and per-run figures beside them."""
    results = [await one_run(nats_url, database_url, opts, run) for run in range(opts.runs)]
    per_run: list[dict[str, Any]] = [
        {
            "ingest_s": round(r.seconds, 3),
            "reports_per_s": round(r.reports_per_s, 1),
            "raw_reports_per_s": round(r.raw_reports_per_s, 1),
            "samples_per_s": round(r.samples / r.seconds, 1),
            "ingest_ratio": round(r.reports_per_s / r.raw_reports_per_s, 3),
            "trip_p50_ms": percentile(r.latencies_ms, 0.50),
            "trip_p99_ms": percentile(r.latencies_ms, 0.99),
            "trip_max_ms": percentile(r.latencies_ms, 1.0),
            "trips": len(r.latencies_ms),
            "expected_trips": r.expected_trips,
        }
        for r in results
    ]

    def median(key: str) -> float | None:
        return median_of([p[key] for p in per_run])

    return {
        "ingest_ratio": median("ingest_ratio"),
        "reports_per_s": median("reports_per_s"),
        "raw_reports_per_s": median("raw_reports_per_s"),
        "samples_per_s": median("samples_per_s"),
        "trip_p50_ms": median("trip_p50_ms"),
        "trip_p99_ms": median("trip_p99_ms"),
        "trip_max_ms": median("trip_max_ms"),
        "ingest_nodes": opts.nodes,
        "ingest_reports": opts.reports,
        "trip_rate": opts.rate,
        "trip_duration_s": opts.duration_s,
        "trips": opts.trips,
        "batch": opts.batch,
        "service_runs": opts.runs,
        "service_per_run": per_run,
    }
