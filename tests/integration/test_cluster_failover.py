"""A NATS server killed mid-rollout (reliability.md 7, A1): the whole rollout of
``test_rollout_e2e`` on a three-server JetStream cluster with R3 streams, with two updater and
two healthgate processes' worth of services, every client given the three URLs. Once the
second wave is released, the server leading the ROLLOUTS stream (the JetStream API's
``cluster.leader``) is killed with SIGKILL, another takes the lead, and the dead one is
started again on its store after a few seconds.

Then: every outbox row of every service was published; every event published on a subject a
service consumes is in that consumer's inbox, and none was dead-lettered (consumed ==
published); each replicated stream holds each event once; the rollout completed; and each
node's BMC accepted exactly one push.

The services run in this process (as ``test_rollout_e2e``) so the test can read the simulated
BMCs' ledgers and the services' outboxes; that ``lockstep up --nats-cluster 3`` runs the same
as separate processes is ``test_scaled_out_stack``'s.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
import yaml

from lockstep_attest.app import create_app as attest_app
from lockstep_attest.settings import Settings as AttestSettings
from lockstep_attest.testing.bundles import make_kit
from lockstep_cli.polling import until
from lockstep_common.natsconn import NatsAccess
from lockstep_common.service import ServiceApp
from lockstep_common.subjects import Namespace
from lockstep_common.topology import EVENT_STREAMS, StreamPolicy, ensure_topology, subject_matches
from lockstep_common.vocabulary import Component
from lockstep_devstack.nats_cluster import NatsCluster
from lockstep_healthgate.app import create_app as healthgate_app
from lockstep_healthgate.settings import Settings as GateSettings
from lockstep_inventory.app import create_app as inventory_app
from lockstep_inventory.settings import Settings as InventorySettings
from lockstep_planner.app import create_app as planner_app
from lockstep_planner.settings import Settings as PlannerSettings
from lockstep_sim.options import DEFAULT_PASSWORD, OPERATOR_USERNAME, SimOptions
from lockstep_sim.runtime import FleetRuntime
from lockstep_updater.app import create_app as updater_app
from lockstep_updater.settings import Settings as UpdaterSettings
from tests.integration.rollout_stack import (
    CADENCE_S,
    NODES,
    Stack,
    gate_policy,
    planner_policy,
    register_fleet,
)
from tests.integration.sim.pldm_fixtures import GB200_GPU, NEW_GPU_VERSION, package_for
from tests.speed import scaled

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
# How long the killed server stays down at least (A1: 5-30 s); it also stays down until another
# server leads the stream, which took about 10 s here (Raft's election timeout).
OUTAGE_S = 5.0
SETTLE_S = 120.0  # an election, redeliveries and the rest of the rollout on a loaded machine
# The second wave soaks longer than an outage lasts. The agents buffer their health reports
# while the TELEMETRY stream has no leader (when the killed server led it too) and deliver them
# once one is elected (docs/simulator.md), but late: the gate judges a wave at the end of its
# soak (plus ``eval_grace_s``), so a soak no longer than the election would be judged on too few
# samples, inconclusive (missing data is not a pass), as a real soak of minutes would not.
WAVE_SOAK_S = 20
# Streams whose every event comes from a service's outbox here (the agents publish telemetry).
OUTBOX_STREAMS = ("BUNDLES", "ROLLOUTS", "PINS", "DEVICES", "GATES", "DRIFT")


def longer_wave_soak(path: Path) -> Path:
    """``test_rollout_e2e``'s change classes with the second wave soaking ``WAVE_SOAK_S``."""
    doc = yaml.safe_load(path.read_text())
    doc["classes"]["routine"]["wave_soak_s"] = WAVE_SOAK_S
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture(scope="module")
def cluster() -> Iterator[NatsCluster]:
    """Three nats-servers with ``sync_interval: always`` (A1's setting), open to clients."""
    base = Path(tempfile.mkdtemp(prefix="lockstep-cluster-"))
    nodes = NatsCluster(base / "nats", 3, sync_always=True)
    nodes.start()
    try:
        yield nodes
    finally:
        nodes.stop()
        shutil.rmtree(base, ignore_errors=True)


def settings(servers: Any, cluster: NatsCluster, namespace: str, service: str) -> dict[str, Any]:
    return {
        "nats_url": cluster.url,  # all three: nats-py fails over to the next
        "database_url": servers.database_url,
        "namespace": namespace,
        "db_schema": f"{namespace}_{service}",
        "stream_replicas": 3,
        "consumer_fetch_timeout_s": 0.2,
        # An ack or a pull lost in the election is redelivered after AckWait: 5 s rather than
        # 30 keeps the test short (the inbox drops the copy either way).
        "consumer_ack_wait_s": 5.0,
        "consumer_redelivery_backoff_s": (5.0, 10.0),
        "relay_poll_s": 0.1,
        "shutdown_grace_s": 5,
        "log_json": False,
    }


@pytest.fixture
async def stack(
    servers: Any,
    cluster: NatsCluster,
    namespace: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[Stack]:
    monkeypatch.setenv("LOCKSTEP_TESTBMC_USERNAME", OPERATOR_USERNAME)
    monkeypatch.setenv("LOCKSTEP_TESTBMC_PASSWORD", DEFAULT_PASSWORD)
    kit = make_kit(
        tmp_path / "release",
        gpu_image=(NEW_GPU_VERSION, package_for(GB200_GPU, NEW_GPU_VERSION)),
        only=(str(Component.GPU_VBIOS),),
    )
    trust = tmp_path / "trust"
    trust.mkdir()
    nc = await nats.connect(servers=cluster.url.split(","))
    # R3 streams before anyone publishes: the agents' telemetry included.
    await ensure_topology(nc.jetstream(), Namespace(namespace), StreamPolicy(replicas=3))
    rt = FleetRuntime(
        SimOptions(NODES, "gb200", seed=13, time_scale=0.002, host_base="127.79.0.1", port=0),
        scheduler_port=0,
        nats=NatsAccess.from_url(cluster.url),
        namespace=namespace,
        cadence_s=CADENCE_S,
    )
    await rt.start()

    def common(service: str) -> dict[str, Any]:
        return settings(servers, cluster, namespace, service)

    def updater() -> ServiceApp:
        return updater_app(
            UpdaterSettings(
                **common("updater"),
                bundle_roots=[tmp_path],
                scheduler_url=rt.scheduler_url,
                worker_poll_s=0.05,
                lease_s=3.0,
                retry_s=0.1,
                drain_poll_s=0.05,
                redfish_poll_s=0.02,
                verify_settle_s=2.0,
            )
        )

    def healthgate() -> ServiceApp:
        return healthgate_app(
            GateSettings(
                **common("healthgate"),
                policy_file=gate_policy(tmp_path / "gate.toml"),
                eval_poll_s=0.1,
                eval_grace_s=0.5,
                heartbeat_watch_s=0.5,
            )
        )

    apps: dict[str, ServiceApp] = {
        "attest": attest_app(
            AttestSettings(
                **common("attest"),
                trust_store=kit.trust,
                bundle_roots=[tmp_path],
                worker_poll_s=0.05,
            )
        ),
        "inventory": inventory_app(InventorySettings(**common("inventory"), sweep_interval_s=0)),
        "planner": planner_app(
            PlannerSettings(
                **common("planner"),
                policy_file=longer_wave_soak(planner_policy(tmp_path / "classes.yaml")),
                approvers_dir=trust,
                worker_poll_s=0.05,
            )
        ),
        # Two of each, on one schema and one set of durable consumers, as `lockstep up
        # --nats-cluster 3` runs them.
        "updater": updater(),
        "updater-2": updater(),
        "healthgate": healthgate(),
        "healthgate-2": healthgate(),
    }
    started: list[ServiceApp] = []
    try:
        for app in apps.values():
            await app.start()
            started.append(app)
        nodes = await register_fleet(rt, apps["inventory"])
        result = Stack(rt, apps, nodes, nc, Namespace(namespace), kit.bundle)
        await result.sweep()
        yield result
    finally:
        await nc.close()
        for app in reversed(started):
            await app.stop()
        await rt.stop()


async def until_true(what: str, check: Any, timeout_s: float = SETTLE_S) -> None:
    """Wait until ``check()`` holds, ``timeout_s`` on the reference machine (``tests.speed``)."""

    async def done() -> bool | None:
        return True if await check() else None

    await until(done, what=what, timeout_s=scaled(timeout_s))


async def outbox(stack: Stack) -> list[dict[str, Any]]:
    """Every service's outbox rows (one app per schema: the replicas share theirs)."""
    rows: list[dict[str, Any]] = []
    for name in ("attest", "inventory", "planner", "updater", "healthgate"):
        found = (
            await stack.apps[name]
            .require()
            .pool.fetch("SELECT event_id, subject, published_at FROM outbox")
        )
        rows += [dict(r) | {"service": name} for r in found]
    return rows


async def missing_from_inboxes(stack: Stack) -> dict[str, set[str]]:
    """Per consumer, the events published on its subjects that it has not taken in."""
    published = await outbox(stack)
    missing: dict[str, set[str]] = {}
    for name in ("attest", "inventory", "planner", "updater", "healthgate"):
        app = stack.apps[name]
        pool = app.require().pool
        for sub in app.subscriptions:
            durable = app.namespace.durable(sub.name)
            wanted = {
                str(r["event_id"])
                for r in published
                if any(subject_matches(p, r["subject"]) for p in sub.subjects)
            }
            have = {
                str(r["event_id"])
                for r in await pool.fetch("SELECT event_id FROM inbox WHERE consumer = $1", durable)
            }
            if wanted - have:
                missing[durable] = wanted - have
    return missing


async def leader_of(nc: Any, stream: str) -> str:
    info = await nc.jetstream().stream_info(stream)
    assert info.cluster is not None and info.cluster.leader, info
    return str(info.cluster.leader)


async def test_killing_the_stream_leader_mid_rollout_loses_no_event(
    stack: Stack, cluster: NatsCluster
) -> None:
    fleet = [n.id for n in stack.rt.fleet]
    rollouts = stack.ns.stream("ROLLOUTS")
    await stack.start_rollout()
    await stack.wait("planner", "wave.planned.", 2)  # wave 1 released: mid-rollout

    victim = await leader_of(stack.nc, rollouts)
    killed_at = time.monotonic()
    await asyncio.to_thread(cluster.member(victim).kill)

    async def new_leader() -> bool:
        try:
            return await leader_of(stack.nc, rollouts) != victim
        except (AssertionError, nats.errors.Error, TimeoutError):
            return False

    await until_true(f"a new leader of {rollouts} after killing {victim}", new_leader, 60)
    elected_s = time.monotonic() - killed_at
    await asyncio.sleep(max(0.0, OUTAGE_S - elected_s))  # the outage itself, not a wait
    await asyncio.to_thread(cluster.restart, victim)

    async def completed() -> bool:
        return bool(await stack.emitted("planner", "rollout.completed."))

    try:
        await until_true("rollout.completed", completed)
    except TimeoutError as exc:
        raise AssertionError(await stack.story()) from exc
    (done,) = await stack.emitted("planner", "rollout.completed.")
    assert done["nodes_updated"] == NODES and done["nodes_failed"] == 0, done

    async def all_published() -> bool:
        return all(r["published_at"] is not None for r in await outbox(stack))

    await until_true("every outbox row published", all_published)

    async def all_consumed() -> bool:
        return not await missing_from_inboxes(stack)

    try:
        await until_true("every published event consumed", all_consumed)
    except TimeoutError as exc:
        raise AssertionError(await missing_from_inboxes(stack)) from exc
    for name in ("attest", "inventory", "planner", "updater", "healthgate"):
        letters = (
            await stack.apps[name].require().pool.fetchval("SELECT count(*) FROM dead_letters")
        )
        assert letters == 0, name

    published = await outbox(stack)
    js = stack.nc.jetstream()
    for spec in EVENT_STREAMS:
        if spec.base not in OUTBOX_STREAMS:
            continue
        info = await js.stream_info(stack.ns.stream(spec.base))
        events = {
            r["event_id"]
            for r in published
            if any(subject_matches(p, r["subject"]) for p in spec.subjects)
        }
        extra = 1 if spec.base == "BUNDLES" else 0  # the test's own bundle.submitted
        # Each event once: the relays' retries after the failover met the duplicate window.
        assert info.state.messages == len(events) + extra, (spec.base, elected_s)
        assert info.config.num_replicas == 3

    for node in fleet:  # the ledger: one accepted push per node for the one target version
        assert len(stack.pushes(node)) == 1, (node, json.dumps(stack.pushes(node)))
        assert stack.rt.scheduler.node(node).drain is None, node
