"""Messaging faults on a three-server JetStream cluster with R3 streams (reliability.md 7, A):

- A2, the whole cluster restarted gracefully (all three servers stopped, then started on their
  stores) while a wave runs: the checks of A1 (``test_cluster_failover``: every outbox row
  published, consumed == published, nothing dead-lettered, each event stored once, the rollout
  completes, one push per node), and every durable consumer came back as it was: the same
  configuration and creation time (never recreated, e.g. with ``DeliverPolicy=new``, which
  would skip what was published meanwhile) and an ack floor that did not move back.
- A3, the leader of a stream paused with SIGSTOP past Raft's election timeout, then resumed,
  while a producer's outbox and a client publish bursts: every acknowledged publish is stored,
  retries the server recognised (PubAck ``duplicate``) are counted, and each event has one
  effect.

The services run in this process, as in A1; the stack and cluster fixtures are A1's.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import time
from typing import Any
from urllib.parse import urlparse

import nats
import pytest
from nats.js.errors import APIError, NoStreamResponseError, ServiceUnavailableError

from lockstep_cli.polling import until
from lockstep_common import natsconn
from lockstep_common.envelope import make_envelope
from lockstep_common.events.v1 import BundleSubmitted
from lockstep_common.natsconn import NatsAccess
from lockstep_common.provenance import source_for
from lockstep_common.subjects import Namespace
from lockstep_common.topology import EVENT_STREAMS, StreamPolicy, ensure_topology, subject_matches
from lockstep_devstack.nats_cluster import NatsCluster
from tests.integration import test_cluster_failover as a1
from tests.integration.rollout_stack import NODES, Stack
from tests.integration.test_messaging import SUBJECT, Effects, applied, consumer_app, submitted
from tests.support import emit, make_app, scalar

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

cluster = a1.cluster  # the three servers (module scope: one cluster for this file)
stack = a1.stack  # the five services (two updaters, two healthgates) over the fleet


async def durable_consumers(nc: Any, ns: Namespace) -> dict[str, Any]:
    """Every durable consumer on the namespace's streams, by name."""
    js = nc.jetstream()
    found: dict[str, Any] = {}
    for spec in EVENT_STREAMS:
        for info in await js.consumers_info(ns.stream(spec.base)):
            if info.config.durable_name:
                found[info.name] = info
    return found


async def check_nothing_lost(stack: Stack) -> None:
    """A1's checks, after the rollout completed: every outbox row published, every event
    consumed by each consumer of its subject, no dead letter, each event stored once, one
    push per node and no drain left."""
    (done,) = await stack.emitted("planner", "rollout.completed.")
    assert done["nodes_updated"] == NODES and done["nodes_failed"] == 0, done

    async def all_published() -> bool:
        return all(r["published_at"] is not None for r in await a1.outbox(stack))

    await a1.until_true("every outbox row published", all_published)

    async def all_consumed() -> bool:
        return not await a1.missing_from_inboxes(stack)

    try:
        await a1.until_true("every published event consumed", all_consumed)
    except TimeoutError as exc:
        raise AssertionError(await a1.missing_from_inboxes(stack)) from exc
    for name in ("attest", "inventory", "planner", "updater", "healthgate"):
        pool = stack.apps[name].require().pool
        assert await pool.fetchval("SELECT count(*) FROM dead_letters") == 0, name
    published = await a1.outbox(stack)
    js = stack.nc.jetstream()
    for spec in EVENT_STREAMS:
        if spec.base not in a1.OUTBOX_STREAMS:
            continue
        info = await js.stream_info(stack.ns.stream(spec.base))
        events = {
            r["event_id"]
            for r in published
            if any(subject_matches(p, r["subject"]) for p in spec.subjects)
        }
        extra = 1 if spec.base == "BUNDLES" else 0  # the test's own bundle.submitted
        assert info.state.messages == len(events) + extra, spec.base
    for node in (n.id for n in stack.rt.fleet):
        assert len(stack.pushes(node)) == 1, (node, json.dumps(stack.pushes(node)))
        assert stack.rt.scheduler.node(node).drain is None, node


async def test_a2_whole_cluster_restart_mid_wave_keeps_consumers_and_loses_no_event(
    stack: Stack, cluster: NatsCluster
) -> None:
    await stack.start_rollout()
    await stack.wait("planner", "wave.planned.", 2)  # wave 1 released: mid-rollout
    before = await durable_consumers(stack.nc, stack.ns)
    assert len(before) >= 10, sorted(before)

    stopped_at = time.monotonic()
    await asyncio.to_thread(cluster.stop)  # SIGTERM to all three: a graceful shutdown
    # Started from this (the main) thread, not a worker thread: the servers' parent-death
    # signal (PR_SET_PDEATHSIG) follows the thread that spawned them, and the event loop's
    # worker threads end with the test, which would SIGTERM the servers under the next one.
    cluster.restart_all()
    outage_s = time.monotonic() - stopped_at

    async def completed() -> bool:
        return bool(await stack.emitted("planner", "rollout.completed."))

    try:
        await a1.until_true("rollout.completed", completed)
    except TimeoutError as exc:
        raise AssertionError(await stack.story()) from exc
    await check_nothing_lost(stack)

    after = await durable_consumers(stack.nc, stack.ns)
    assert sorted(after) == sorted(before)
    caught_up: set[str] = set()

    async def every_consumer_caught_up() -> bool:
        # Health reports keep arriving, so "nothing pending" is a moment, not a state: each
        # consumer must reach it once (at once on a quiet machine; later on a busy one).
        for name, info in (await durable_consumers(stack.nc, stack.ns)).items():
            if info.num_ack_pending == 0 and info.num_pending == 0:
                caught_up.add(name)
        return caught_up >= set(before)

    try:
        await a1.until_true("every consumer caught up", every_consumer_caught_up)
    except TimeoutError as exc:
        raise AssertionError(sorted(set(before) - caught_up)) from exc
    for name, old in before.items():
        new = after[name]
        # Not recreated: same creation time and configuration (deliver policy included).
        assert new.created == old.created, (name, outage_s)
        assert new.config.as_dict() == old.config.as_dict(), name
        assert new.config.deliver_policy == old.config.deliver_policy, name
        # Resumed from its ack floor: nothing it had acknowledged was handed out again as new.
        assert old.ack_floor is not None and new.ack_floor is not None
        assert new.ack_floor.stream_seq >= old.ack_floor.stream_seq, name


# A3. nats-server has no setting for its Raft election timeout (compiled in: a few seconds,
# randomised); the pause lasts until another server leads the stream and every publish was
# served elsewhere, past the election timeout as the test plan's 20 s pause is.
# The pause lasts at least until clients connected to the paused server have moved to another
# (natsconn.PING_INTERVAL_S x MAX_OUTSTANDING_PINGS after their last answered ping).
FAILOVER_S = 60.0
BURST = 300  # client publishes during the pause, each retried under its Nats-Msg-Id
OUTBOX_BURST = 100  # events committed to a producer's outbox during the pause
REPUBLISHED = 20  # acknowledged publishes sent again afterwards, as by a client that lost acks


IN_PROCESS = 10158  # nats-server JSStreamDuplicateMessageConflict ("... is in process")


class Publisher:
    """A client publishing each event until the server acknowledges it, under the event's id
    (a retry after a timeout is the same publish): what it was acknowledged with, and how
    many acknowledgements said ``duplicate``."""

    def __init__(self, nc: Any, wire: str) -> None:
        self.js = nc.jetstream()
        self.wire = wire
        self.acked: dict[str, int] = {}  # Nats-Msg-Id -> acknowledged stream sequence
        self.duplicates = 0
        self.gave_up = 0

    async def publish(self, body: bytes, msg_id: str, patience_s: float = 90.0) -> None:
        deadline = time.monotonic() + patience_s
        while time.monotonic() < deadline:
            try:
                ack = await self.js.publish(
                    self.wire, body, headers={"Nats-Msg-Id": msg_id}, timeout=1.0
                )
            except (TimeoutError, nats.errors.TimeoutError, NoStreamResponseError):
                continue  # no answer (the leader is paused): the same id again
            except APIError as exc:
                # 10158 "duplicate message id is in process": the first try is still being
                # replicated; 503: the stream has no leader yet. Both: the same id again.
                if exc.err_code == IN_PROCESS or exc.code == 503:
                    await asyncio.sleep(0.05)  # a retry's pace, not a wait for a result
                    continue
                raise
            if msg_id in self.acked:
                assert ack.seq == self.acked[msg_id], "one id stored at two sequences"
            self.acked[msg_id] = ack.seq
            self.duplicates += bool(ack.duplicate)
            return
        self.gave_up += 1


def member_of(cluster: NatsCluster, nc: Any) -> Any:
    """The cluster member ``nc`` is connected to."""
    port = nc.connected_url.port
    for m in cluster.members:
        if urlparse(m.url).port == port:
            return m
    raise AssertionError(f"{nc.connected_url} is no member of the cluster")


async def current_leader(nc: Any, stream: str) -> str | None:
    try:
        return await a1.leader_of(nc, stream)
    except (AssertionError, nats.errors.Error, TimeoutError):
        return None


async def lead(nc: Any, stream: str, name: str) -> None:
    """Make server ``name`` the leader of ``stream`` (a step-down with a preferred successor,
    nats-server 2.11+), unless it leads already."""
    deadline = time.monotonic() + 60
    while await current_leader(nc, stream) != name:
        assert time.monotonic() < deadline, f"{name} never took the lead of {stream}"
        body = json.dumps({"placement": {"preferred": name}}).encode()
        with contextlib.suppress(nats.errors.Error, TimeoutError):
            await nc.request(f"$JS.API.STREAM.LEADER.STEPDOWN.{stream}", body, timeout=5)
        await until(lambda: current_leader(nc, stream), f"a leader of {stream}", timeout_s=30)


async def pause_leader(
    cluster: NatsCluster, nc: Any, stream: str, leader: str, during: Any, served: Any
) -> tuple[float, float]:
    """SIGSTOP ``leader`` while ``during`` runs, until another server leads ``stream`` and
    ``served()`` holds, which must come true while it is still paused; SIGCONT. Returns the
    seconds the election took and those until ``served()``."""
    await asyncio.to_thread(cluster.member(leader).pause)
    paused_at = time.monotonic()
    try:
        await during

        async def new_leader() -> bool:
            return await current_leader(nc, stream) not in (None, leader)

        await a1.until_true(f"another leader of {stream}", new_leader, 60)
        elected_s = time.monotonic() - paused_at
        # Clients connected to the paused server find it stale (natsconn's pings) and move
        # to another: the work goes on during the pause, not only after it.
        await a1.until_true(f"every publish served while {leader} is paused", served, FAILOVER_S)
        served_s = time.monotonic() - paused_at
    finally:
        await asyncio.to_thread(cluster.member(leader).resume)
    # Back in the cluster and current with its JetStream (it answers 503 until then).
    await asyncio.to_thread(cluster.member(leader).wait_ready, 60, whole_jetstream=True)
    return elected_s, served_s


async def _read(js: Any, stream: str, seq: int) -> Any:
    """The stored message at ``seq``; None while the cluster answers 503 (JetStream briefly
    unavailable after the paused leader rejoined, seen in CI): asked again, not failed."""
    try:
        return await js.get_msg(stream, seq)
    except ServiceUnavailableError:
        return None


async def test_a3_paused_stream_leader_loses_no_acked_publish_and_duplicates_have_no_effect(
    servers: Any, cluster: NatsCluster, namespace: str
) -> None:
    ns = Namespace(namespace)
    overrides: dict[str, Any] = {
        "nats_url": cluster.url,
        "stream_replicas": 3,
        # A pull or an ack lost to the pause is redelivered after AckWait: 5 s, not 30.
        "consumer_ack_wait_s": 5.0,
        "consumer_redelivery_backoff_s": (5.0, 10.0),
        "relay_poll_s": 0.1,
    }
    # Connected as the services connect (natsconn: its ping interval finds a paused server).
    nc = await natsconn.connect(NatsAccess.from_url(cluster.url), name="a3-test")
    await ensure_topology(nc.jetstream(), ns, StreamPolicy(replicas=3))
    producer = make_app(servers, namespace, "producer", **overrides)
    effects = Effects()
    consumer = await consumer_app(servers, namespace, effects, **overrides)
    await producer.start()
    stream = ns.stream("BUNDLES")
    client = Publisher(nc, ns.wire(SUBJECT))
    total = 10 + OUTBOX_BURST + BURST
    try:
        # The server the producer is connected to leads the stream: the pause takes away both
        # its connection and the stream's leader, the worst case for its relay.
        leader = member_of(cluster, producer.require().nc).name
        await lead(nc, stream, leader)
        await emit(producer, SUBJECT, [submitted(i) for i in range(10)])  # before the pause
        await a1.until_true("the first events applied", lambda: _ge(applied(consumer), 10))

        envelopes = [
            make_envelope(submitted(i), source=source_for(BundleSubmitted))
            for i in range(1000, 1000 + BURST)
        ]
        burst = asyncio.gather(*(client.publish(e.to_json(), str(e.event_id)) for e in envelopes))

        async def served() -> bool:
            return burst.done() and await _relayed(producer)

        elected_s, served_s = await pause_leader(
            cluster,
            nc,
            stream,
            leader,
            emit(producer, SUBJECT, [submitted(i) for i in range(10, 10 + OUTBOX_BURST)]),
            served,
        )
        await burst
        assert client.gave_up == 0

        await a1.until_true("every event applied", lambda: _ge(applied(consumer), total), 90)
        await a1.until_true("the outbox relayed", lambda: _relayed(producer))
        # Every acknowledged publish is in the stream, at the sequence it was acknowledged with
        # (the paused leader's term rolled none of them back).
        js = nc.jetstream()
        for msg_id, seq in client.acked.items():
            msg = await until(
                functools.partial(_read, js, stream, seq), f"message {seq} readable", 30, 0.2
            )
            assert msg.headers is not None and msg.headers.get("Nats-Msg-Id") == msg_id, seq
        # A client that lost its acknowledgements publishes again: each copy is recognised.
        before = client.duplicates
        for e in envelopes[:REPUBLISHED]:
            await client.publish(e.to_json(), str(e.event_id))
        assert client.duplicates - before == REPUBLISHED

        # Each event stored once and applied once.
        info = await js.stream_info(stream)
        relay_duplicates = producer.metrics.registry.get_sample_value(
            "lockstep_outbox_duplicates_total"
        )
        figures = (elected_s, served_s, client.duplicates, relay_duplicates)
        assert info.state.messages == total, figures
        assert await applied(consumer) == total
        pool = consumer.require().pool
        assert await scalar(pool, "SELECT count(*) FROM effects WHERE applied > 1") == 0
        assert await scalar(pool, "SELECT count(*) FROM inbox") == total
        assert await scalar(pool, "SELECT count(*) FROM dead_letters") == 0
    finally:
        await consumer.stop()
        await producer.stop()
        await nc.close()


async def _relayed(app: Any) -> bool:
    pool = app.require().pool
    return not await pool.fetchval("SELECT count(*) FROM outbox WHERE published_at IS NULL")


async def _ge(value: Any, floor: int) -> bool:
    return bool(await value >= floor)
