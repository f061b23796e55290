"""The updater service against real NATS and PostgreSQL, the inventory service answering its
fleet.query, and the simulator's BMCs and scheduler: wave.planned -> pushes -> device.verified
and wave.completed; a wave naming a node outside the approved plan is refused and touches
nothing; a restart mid-wave pushes nothing twice (the BMC ledger)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client as NatsClient
from typer.testing import CliRunner

from lockstep_cli.main import app as cli_app
from lockstep_cli.polling import until
from lockstep_common import subjects
from lockstep_common.envelope import EventData, make_envelope
from lockstep_common.events.v1 import (
    AttestedComponent,
    BundleAttested,
    GateTripped,
    RolloutPlanned,
    WavePlan,
    WavePlanned,
)
from lockstep_common.provenance import source_for
from lockstep_common.service import ServiceApp
from lockstep_common.subjects import Namespace
from lockstep_common.vocabulary import ChangeClass, Component, GateVerdict
from lockstep_inventory.adapters import registry
from lockstep_inventory.app import create_app as inventory_app
from lockstep_inventory.domain.fleet_file import NodeEntry
from lockstep_inventory.settings import Settings as InventorySettings
from lockstep_sim.options import DEFAULT_PASSWORD, OPERATOR_USERNAME, SimOptions
from lockstep_sim.runtime import FleetRuntime
from lockstep_updater.app import create_app as updater_app
from lockstep_updater.settings import Settings as UpdaterSettings
from tests.integration.sim.pldm_fixtures import GB200_GPU, NEW_GPU_VERSION, package_for

pytestmark = pytest.mark.integration
STACK = "c" * 64
PUSH = "update-multipart"


def lockstep(*args: str) -> tuple[int, str]:
    """``lockstep ...`` (run in a thread: its asyncio.run cannot nest in the test's loop)."""
    result = CliRunner().invoke(cli_app, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.output


@dataclass
class Rig:
    servers: Any
    namespace: str
    rt: FleetRuntime
    inventory: ServiceApp
    nc: NatsClient
    ns: Namespace
    bundle: Path
    updaters: list[ServiceApp]
    monkeypatch: pytest.MonkeyPatch

    async def start_updater(self, **extra: Any) -> ServiceApp:
        """An updater on the rig; ``extra`` settings override the fast defaults."""
        settings: dict[str, Any] = {
            "worker_poll_s": 0.05,
            "lease_s": 3.0,
            "retry_s": 0.1,
            **extra,
        }
        app = updater_app(
            UpdaterSettings(
                nats_url=self.servers.nats_url,
                database_url=self.servers.database_url,
                namespace=self.namespace,
                db_schema=f"{self.namespace}_updater",
                bundle_roots=[self.bundle.parent],
                scheduler_url=self.rt.scheduler_url,
                drain_poll_s=0.05,
                redfish_poll_s=0.02,
                verify_settle_s=2.0,
                consumer_fetch_timeout_s=0.2,
                relay_poll_s=0.1,
                shutdown_grace_s=5,
                log_json=False,
                **settings,
            )
        )
        await app.start()
        self.updaters.append(app)
        return app

    async def publish(self, subject: str, data: EventData) -> None:
        env = make_envelope(data, source=source_for(data), correlation_id="intent-1")
        await self.nc.jetstream().publish(
            self.ns.wire(subject), env.to_json(), headers={"Nats-Msg-Id": str(env.event_id)}
        )

    def pushes(self, node_id: str) -> list[dict[str, Any]]:
        return [
            e
            for e in self.rt.simulator.bmc(node_id).ledger
            if e["action"] == PUSH and e.get("status") == 202
        ]

    async def emitted(self, app: ServiceApp, prefix: str) -> list[dict[str, Any]]:
        rows = await app.require().pool.fetch(
            "SELECT payload FROM outbox WHERE subject LIKE $1 ORDER BY id", prefix + "%"
        )
        return [json.loads(r["payload"])["data"] for r in rows]

    async def rollout(self, rollout_id: str, plan: tuple[str, ...], wave: tuple[str, ...]) -> None:
        image = (self.bundle / "images" / "gpu.fwpkg").read_bytes()
        await self.publish(
            subjects.bundle_attested(),
            BundleAttested(
                bundle_id="gb200-fw",
                bundle_version="2026.11",
                stack_hash=STACK,
                checks=(),
                bundle_uri=str(self.bundle),
                components=(
                    AttestedComponent(
                        profile="gb200",
                        component=Component.GPU_VBIOS,
                        version=NEW_GPU_VERSION,
                        image="images/gpu.fwpkg",
                        sha384=hashlib.sha384(image).hexdigest(),
                        size=len(image),
                        banks="ab",
                        activation="reset",
                    ),
                ),
            ),
        )
        await self.publish(
            subjects.rollout_planned(rollout_id),
            RolloutPlanned(
                rollout_id=rollout_id,
                intent_id=uuid.uuid4(),
                stack_hash=STACK,
                change_class=ChangeClass.STANDARD,
                waves=(WavePlan(number=0, node_ids=plan),),
            ),
        )
        await self.publish(
            subjects.wave_planned(rollout_id),
            WavePlanned(
                rollout_id=rollout_id,
                wave=0,
                node_ids=wave,
                components=(Component.GPU_VBIOS,),
                max_unavailable=2,
                failure_budget=0,
                soak_seconds=0,
            ),
        )


@pytest.fixture
async def rig(
    servers: Any, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Rig]:
    monkeypatch.setenv("LOCKSTEP_TESTBMC_USERNAME", OPERATOR_USERNAME)
    monkeypatch.setenv("LOCKSTEP_TESTBMC_PASSWORD", DEFAULT_PASSWORD)
    bundle = tmp_path / "bundle"
    (bundle / "images").mkdir(parents=True)
    (bundle / "images" / "gpu.fwpkg").write_bytes(package_for(GB200_GPU, NEW_GPU_VERSION))
    rt = FleetRuntime(
        SimOptions(4, "gb200", time_scale=0.002, host_base="127.76.0.1", port=0),
        scheduler_port=0,
    )
    await rt.start()
    inventory = inventory_app(
        InventorySettings(
            nats_url=servers.nats_url,
            database_url=servers.database_url,
            namespace=namespace,
            db_schema=f"{namespace}_inventory",
            sweep_interval_s=0,
            consumer_fetch_timeout_s=0.2,
            relay_poll_s=0.2,
            shutdown_grace_s=5,
            log_json=False,
        )
    )
    await inventory.start()
    nc = await nats.connect(servers.nats_url)
    rig = Rig(servers, namespace, rt, inventory, nc, Namespace(namespace), bundle, [], monkeypatch)
    try:
        nodes = [
            NodeEntry.model_validate(
                {**n.summary(rt.simulator.port), "credentials": "env:LOCKSTEP_TESTBMC"}
            )
            for n in rt.fleet
        ]
        async with inventory.require().pool.acquire() as conn:
            await registry.import_nodes(conn, nodes)
        yield rig
    finally:
        for app in rig.updaters:
            await app.stop()
        await nc.close()
        await inventory.stop()
        rt.simulator.set_faults(None)
        await rt.stop()


async def flashed_wave(
    rig: Rig, rollout: str, nodes: tuple[str, ...]
) -> tuple[Any, dict[str, Any]]:
    """A started updater, ``nodes`` released as one wave of ``rollout``: the app and its
    ``wave.completed``."""
    app = await rig.start_updater()
    await rig.rollout(rollout, nodes, nodes)

    async def completed() -> list[dict[str, Any]]:
        return await rig.emitted(app, "wave.completed.")

    (done,) = await until(completed, what="wave.completed", timeout_s=60)
    return app, done


async def test_a_released_wave_is_flashed_verified_and_completed(rig: Rig) -> None:
    nodes = tuple(n.id for n in rig.rt.fleet[:3])
    app, done = await flashed_wave(rig, "r-svc", nodes)
    assert sorted(done["succeeded"]) == sorted(nodes) and done["failed"] == []
    verified = await rig.emitted(app, "device.verified.")
    assert sorted(v["node_id"] for v in verified) == sorted(nodes)
    assert {v["to_version"] for v in verified} == {NEW_GPU_VERSION}
    for node in nodes:
        assert len(rig.pushes(node)) == 1
        assert rig.rt.scheduler.node(node).drain is None
    assert rig.pushes(rig.rt.fleet[3].id) == []  # not in the wave: untouched

    # lockstep node history: every step, with its attempt and fencing token.
    rig.monkeypatch.setenv("LOCKSTEP_NATS_URL", rig.servers.nats_url)
    rig.monkeypatch.setenv("LOCKSTEP_NAMESPACE", rig.namespace)
    # The updater answers over the bus: the CLI has no database to reach.
    rig.monkeypatch.setenv("LOCKSTEP_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    rig.monkeypatch.setenv("LOCKSTEP_UPDATER_DB_SCHEMA", f"{rig.namespace}_updater")
    code, out = await asyncio.to_thread(lockstep, "node", "history", nodes[0], "--json")
    assert code == 0, out
    steps = json.loads(out)
    # A step may be retried (a BMC or fleet.query timeout on a loaded machine): a retry is
    # recorded as the step again with its reason; the moves between steps are fixed.
    retried = [s for s in steps if s["step"] == s["outcome"]]
    assert all(s["reason"] for s in retried), retried
    assert [(s["step"], s["outcome"]) for s in steps if s not in retried] == [
        ("preflight", "staging"),
        ("staging", "cordoning"),
        ("cordoning", "draining"),
        ("draining", "activating"),
        ("activating", "awaiting_bmc"),
        ("awaiting_bmc", "verifying"),
        ("verifying", "uncordoning"),
        ("uncordoning", "done"),
    ]
    assert all(s["rollout_id"] == "r-svc" and s["token"] >= 1 for s in steps)
    code, out = await asyncio.to_thread(lockstep, "node", "history", "bad node")
    assert code == 2 and "node id 'bad node' cannot be a NATS subject token" in out


async def test_a_wave_s_steps_ask_the_inventory_once_per_page_not_once_per_step(
    rig: Rig,
) -> None:
    """Issue 28 item 3: the wave's nodes are read once (one fleet.query per page of
    MAX_FLEET_PAGE ids, here one page) and every step is served from that copy; before, each
    of the dozens of steps below sent its own fleet.query."""
    asked: list[dict[str, Any]] = []

    async def heard(msg: Any) -> None:
        asked.append(json.loads(msg.data)["data"])

    sub = await rig.nc.subscribe(rig.ns.wire(subjects.fleet_query()), cb=heard)
    nodes = tuple(n.id for n in rig.rt.fleet[:3])
    app, done = await flashed_wave(rig, "r-snap", nodes)
    await sub.unsubscribe()
    assert sorted(done["succeeded"]) == sorted(nodes)
    steps = await app.require().pool.fetch(f"SELECT 1 FROM {rig.namespace}_updater.node_steps")
    assert len(steps) >= 8 * len(nodes)  # every step of every node ran
    assert len(asked) == 1, asked  # and one page was asked for them all
    assert sorted(asked[0]["scope"]["nodes"]) == sorted(nodes)


async def test_a_wave_naming_a_node_outside_the_plan_is_refused_and_touches_nothing(
    rig: Rig,
) -> None:
    planned = (rig.rt.fleet[0].id,)
    corrupted = (rig.rt.fleet[0].id, rig.rt.fleet[3].id)
    app = await rig.start_updater()
    await rig.rollout("r-bad", planned, corrupted)

    async def halted() -> list[dict[str, Any]]:
        return await rig.emitted(app, "rollout.halted.")

    (halt,) = await until(halted, what="rollout.halted", timeout_s=30)
    assert halt["halted_by"] == "updater"
    assert f"outside the approved plan ({rig.rt.fleet[3].id})" in halt["reason"]
    assert await app.require().pool.fetchval("SELECT count(*) FROM node_work") == 0
    for node in corrupted:
        assert rig.pushes(node) == []
        assert rig.rt.scheduler.node(node).drain is None


async def test_a_restart_mid_wave_pushes_nothing_twice(rig: Rig) -> None:
    nodes = tuple(n.id for n in rig.rt.fleet[:2])
    first = await rig.start_updater()
    await rig.rollout("r-restart", nodes, nodes)

    async def pushed_once() -> bool:
        return any(rig.pushes(n) for n in nodes)

    await until(pushed_once, what="a push accepted", timeout_s=60)
    await first.stop()  # mid-wave: a push was accepted, nothing is verified yet everywhere
    rig.updaters.remove(first)
    open_items = await rig.inventory.require().pool.fetchval(
        f'SELECT count(*) FROM "{rig.namespace}_updater".node_work WHERE state <> $1', "done"
    )
    assert open_items > 0  # the restart really is mid-wave
    second = await rig.start_updater()

    async def completed() -> list[dict[str, Any]]:
        return await rig.emitted(second, "wave.completed.")

    (done,) = await until(completed, what="wave.completed after the restart", timeout_s=60)
    assert sorted(done["succeeded"]) == sorted(nodes)
    for node in nodes:
        assert len(rig.pushes(node)) == 1


async def test_a_tripped_gate_stops_every_mutating_call_of_its_rollout(rig: Rig) -> None:
    nodes = tuple(n.id for n in rig.rt.fleet[:2])
    app = await rig.start_updater()
    await rig.publish(
        subjects.gate(GateVerdict.TRIPPED, "r-gate"),
        GateTripped(rollout_id="r-gate", wave=0, verdict=GateVerdict.TRIPPED, evidence=()),
    )

    async def halted() -> str | None:
        reason: str | None = await app.require().pool.fetchval(
            "SELECT reason FROM halts WHERE rollout_id = 'r-gate'"
        )
        return reason

    assert await until(halted, what="the halt recorded") == "gate tripped on wave 0"
    await rig.rollout("r-gate", nodes, nodes)

    async def completed() -> list[dict[str, Any]]:
        return await rig.emitted(app, "wave.completed.")

    (done,) = await until(completed, what="wave.completed", timeout_s=60)
    assert done["succeeded"] == [] and sorted(done["failed"]) == sorted(nodes)
    states = await app.require().pool.fetch("SELECT state, reason FROM node_work")
    assert {(s["state"], s["reason"]) for s in states} == {
        ("cancelled", "rollout halted: gate tripped on wave 0")
    }
    for node in nodes:
        assert rig.pushes(node) == []
        assert rig.rt.scheduler.node(node).drain is None
