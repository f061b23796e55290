"""The whole rollout on real NATS + PostgreSQL and the simulator (issue 13): attest, inventory,
planner, updater and healthgate started in-process together, over one simulated fleet whose
node agents publish health. A signed release kit moving the GPU VBIOS is attested; a routine
intent -> canary ``wave.planned`` -> pushes (one accepted per node in the BMC ledgers) ->
``gate.passed`` after the soak -> the next wave -> ``rollout.completed`` and ``pin.changed``; a
fresh sweep finds every node conforming. A bad image instead degrades the canary's health:
``gate.tripped`` -> ``rollout.halted``, and no node outside the canary was touched."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import nats
import pytest
import yaml
from nats.aio.client import Client as NatsClient

from lockstep_attest.app import create_app as attest_app
from lockstep_attest.settings import Settings as AttestSettings
from lockstep_attest.testing.bundles import make_kit
from lockstep_cli.polling import until
from lockstep_common import subjects
from lockstep_common.compatibility.files import packaged_rules
from lockstep_common.envelope import EventData, make_envelope
from lockstep_common.events.v1 import BundleSubmitted, IntentSubmitted, ScopeSelector
from lockstep_common.natsconn import NatsAccess
from lockstep_common.service import ServiceApp
from lockstep_common.subjects import Namespace
from lockstep_common.vocabulary import ChangeClass, Component
from lockstep_healthgate.app import create_app as healthgate_app
from lockstep_healthgate.settings import Settings as GateSettings
from lockstep_inventory import admin, queries
from lockstep_inventory.adapters import registry, state
from lockstep_inventory.app import create_app as inventory_app
from lockstep_inventory.domain.fleet_file import NodeEntry
from lockstep_inventory.settings import Settings as InventorySettings
from lockstep_inventory.sweeping import run_sweep
from lockstep_planner.app import create_app as planner_app
from lockstep_planner.settings import Settings as PlannerSettings
from lockstep_sim.faults import Fault, FaultPlan
from lockstep_sim.options import DEFAULT_PASSWORD, DEFAULT_USERNAME, SimOptions
from lockstep_sim.runtime import FleetRuntime
from lockstep_updater.app import create_app as updater_app
from lockstep_updater.settings import Settings as UpdaterSettings
from tests.integration.sim.pldm_fixtures import GB200_GPU, NEW_GPU_VERSION, package_for

pytestmark = pytest.mark.integration
NODES = 10  # a canary of 5 and 5 controls, then a wave of 5 compared with the canary
SOAK_S = 3  # each wave soaks this long: ~12 health reports per node at the agents' cadence
CADENCE_S = 0.25
PUSH = "update-multipart"  # the BMC ledger's action for a POST to MultipartHttpPushUri
# The healthgate's minimums for a small fleet: 5 against 5 nodes is the smallest pair for which
# Mann-Whitney's exact 98% interval exists (2 / C(10, 5) < 0.02; with 4 and 4 it never does).
GATE_POLICY = """
[minimum]
canary_nodes = 5
control_nodes = 5
samples_per_node = 3
"""


def planner_policy(path: Path) -> Path:
    """The packaged change classes, with a routine change pre-approved, a canary of 5 (the
    healthgate's minimum per stratum), one wave after it, and short soaks."""
    doc = yaml.safe_load(
        resources.files("lockstep_planner").joinpath("data/change_classes.yaml").read_bytes()
    )
    routine = doc["classes"]["routine"]
    routine.update(
        canary_min_per_stratum=5,
        wave_fractions=[1.0],
        canary_soak_s=SOAK_S,
        layer_soak_s=0,
        wave_soak_s=SOAK_S,
    )
    routine["approvals"]["count"] = 0
    path.write_text(yaml.safe_dump(doc))
    return path


def gate_policy(path: Path) -> Path:
    """The packaged gate policy with the smallest minimums a small fleet can meet."""
    text = resources.files("lockstep_healthgate").joinpath("data/default_policy.toml").read_text()
    head, _, rest = text.partition("[minimum]")
    rest = rest.split("\n[hard_rules]", 1)[1]
    path.write_text(head + GATE_POLICY + "\n[hard_rules]" + rest)
    return path


@dataclass
class Stack:
    """The four services, the simulated fleet, and a NATS client on their namespace."""

    rt: FleetRuntime
    apps: dict[str, ServiceApp]
    nodes: list[NodeEntry]
    nc: NatsClient
    ns: Namespace
    bundle: Path

    async def publish(self, subject: str, data: EventData) -> None:
        env = make_envelope(data, source="/test")
        await self.nc.jetstream().publish(
            self.ns.wire(subject), env.to_json(), headers={"Nats-Msg-Id": str(env.event_id)}
        )

    async def emitted(self, service: str, prefix: str) -> list[dict[str, Any]]:
        """The data of every event ``service`` committed on subjects starting ``prefix``."""
        rows = (
            await self.apps[service]
            .require()
            .pool.fetch(
                "SELECT payload FROM outbox WHERE subject LIKE $1 ORDER BY id", prefix + "%"
            )
        )
        return [json.loads(r["payload"])["data"] for r in rows]

    async def wait(self, service: str, prefix: str, count: int = 1) -> list[dict[str, Any]]:
        async def enough() -> list[dict[str, Any]] | None:
            found = await self.emitted(service, prefix)
            return found if len(found) >= count else None

        try:
            return await until(enough, what=f"{count} {prefix} from {service}", timeout_s=40)
        except TimeoutError as exc:
            raise AssertionError(await self.story()) from exc

    async def story(self) -> str:
        """Every event each service committed, in order: what a failure shows."""
        lines = []
        for name, app in self.apps.items():
            rows = await app.require().pool.fetch(
                "SELECT subject, payload FROM outbox WHERE subject NOT LIKE 'telemetry.%' "
                "AND subject NOT LIKE 'drift.%' ORDER BY id"
            )
            lines += [f"{name}: {r['subject']} {json.loads(r['payload'])['data']}" for r in rows]
        return "\n".join(lines)

    async def sweep(self) -> None:
        inventory = self.apps["inventory"]
        assert isinstance(inventory.settings, InventorySettings)
        await run_sweep(
            inventory.require().pool,
            self.nodes,
            inventory.settings,
            by="test",
            source=admin.SOURCE,
            rules=packaged_rules(),
        )

    def pushes(self, node_id: str) -> list[dict[str, Any]]:
        """Pushes the node's BMC accepted."""
        return [
            e
            for e in self.rt.simulator.bmc(node_id).ledger
            if e["action"] == PUSH and e.get("status") == 202
        ]

    async def start_rollout(self) -> dict[str, Any]:
        """The release kit submitted to the attest service; once ``bundle.attested`` reached the
        planner and the updater, a routine intent moving the whole fleet to it."""
        await self.publish(
            subjects.bundle_submitted(),
            BundleSubmitted(bundle_uri=self.bundle.as_uri(), submitted_by="ci-job-13"),
        )
        (bundle,) = await self.wait("attest", "bundle.attested")

        async def known() -> bool:
            for name in ("planner", "updater"):
                n = await self.apps[name].require().pool.fetchval("SELECT count(*) FROM bundles")
                if not n:
                    return False
            return True

        await until(known, what="the bundle recorded by planner and updater")
        await self.publish(
            subjects.intent_submitted(),
            IntentSubmitted(
                intent_id=uuid.uuid4(),
                stack_hash=bundle["stack_hash"],
                scope=ScopeSelector(),
                change_class=ChangeClass.ROUTINE,
                approval_ref="CAB-1313",
                submitted_by="alice",
            ),
        )
        return bundle


def common(servers: Any, namespace: str, service: str) -> dict[str, Any]:
    return {
        "nats_url": servers.nats_url,
        "database_url": servers.database_url,
        "namespace": namespace,
        "db_schema": f"{namespace}_{service}",
        "consumer_fetch_timeout_s": 0.2,
        "relay_poll_s": 0.1,
        "shutdown_grace_s": 5,
        "log_json": False,
    }


@pytest.fixture
async def stack(
    servers: Any, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Stack]:
    monkeypatch.setenv("LOCKSTEP_TESTBMC_USERNAME", DEFAULT_USERNAME)
    monkeypatch.setenv("LOCKSTEP_TESTBMC_PASSWORD", DEFAULT_PASSWORD)
    # A signed release kit whose one image is a GPU VBIOS package the simulated GPUs accept.
    kit = make_kit(
        tmp_path / "release",
        gpu_image=(NEW_GPU_VERSION, package_for(GB200_GPU, NEW_GPU_VERSION)),
        only=(str(Component.GPU_VBIOS),),
    )
    trust = tmp_path / "trust"
    trust.mkdir()
    rt = FleetRuntime(
        SimOptions(NODES, "gb200", seed=13, time_scale=0.002, host_base="127.78.0.1", port=0),
        scheduler_port=0,
        nats=NatsAccess.from_url(servers.nats_url),
        namespace=namespace,
        cadence_s=CADENCE_S,
        create_streams=True,
    )
    await rt.start()
    apps: dict[str, ServiceApp] = {
        "attest": attest_app(
            AttestSettings(
                **common(servers, namespace, "attest"),
                trust_store=kit.trust,
                bundle_roots=[tmp_path],
                worker_poll_s=0.05,
            )
        ),
        "inventory": inventory_app(
            InventorySettings(**common(servers, namespace, "inventory"), sweep_interval_s=0)
        ),
        "planner": planner_app(
            PlannerSettings(
                **common(servers, namespace, "planner"),
                policy_file=planner_policy(tmp_path / "classes.yaml"),
                approvers_dir=trust,
                worker_poll_s=0.05,
            )
        ),
        "updater": updater_app(
            UpdaterSettings(
                **common(servers, namespace, "updater"),
                bundle_roots=[tmp_path],
                scheduler_url=rt.scheduler_url,
                worker_poll_s=0.05,
                lease_s=3.0,
                retry_s=0.1,
                drain_poll_s=0.05,
                redfish_poll_s=0.02,
                verify_settle_s=2.0,
            )
        ),
        "healthgate": healthgate_app(
            GateSettings(
                **common(servers, namespace, "healthgate"),
                policy_file=gate_policy(tmp_path / "gate.toml"),
                eval_poll_s=0.1,
                eval_grace_s=0.5,
                heartbeat_watch_s=0.5,
            )
        ),
    }
    started: list[ServiceApp] = []
    nc = await nats.connect(servers.nats_url)
    try:
        for app in apps.values():
            await app.start()
            started.append(app)
        nodes = [
            NodeEntry.model_validate(
                {
                    **n.summary(rt.simulator.port),
                    "credentials": "env:LOCKSTEP_TESTBMC",
                    # One supplier, so one stratum: the healthgate needs 5 canary and 5 control
                    # nodes per stratum, more than 10 nodes over the simulator's 3 suppliers hold.
                    "supplier": "supplier-a",
                }
            )
            for n in rt.fleet
        ]
        async with apps["inventory"].require().pool.acquire() as conn:
            await registry.import_nodes(conn, nodes)
        result = Stack(rt, apps, nodes, nc, Namespace(namespace), kit.bundle)
        await result.sweep()  # what the fleet runs now: the planner plans over it
        yield result
    finally:
        await nc.close()
        for app in reversed(started):
            await app.stop()
        rt.simulator.set_faults(None)
        await rt.stop()


async def test_an_attested_bundle_rolls_out_over_the_fleet_wave_by_wave(stack: Stack) -> None:
    fleet = [n.id for n in stack.rt.fleet]
    old = {
        c.version
        for m, c in stack.rt.simulator.bmc(fleet[0]).node.components.items()
        if m.startswith("HGX_FW_GPU_")
    }
    assert NEW_GPU_VERSION not in old  # the bundle really moves the fleet
    await stack.start_rollout()

    (canary,) = await stack.wait("planner", "wave.planned.")
    assert canary["wave"] == 0 and canary["components"] == [str(Component.GPU_VBIOS)]
    assert len(canary["node_ids"]) == 5, json.dumps(canary["strata"], indent=1)
    (first_pass,) = await stack.wait("healthgate", "gate.passed.")
    assert first_pass["wave"] == 0
    for node in fleet:  # the canary alone was flashed before its gate passed
        assert len(stack.pushes(node)) == (1 if node in canary["node_ids"] else 0), node

    (done,) = await stack.wait("planner", "rollout.completed.")
    waves = await stack.emitted("planner", "wave.planned.")
    assert [w["wave"] for w in waves] == [0, 1]
    assert sorted(n for w in waves for n in w["node_ids"]) == sorted(fleet)
    passed = await stack.emitted("healthgate", "gate.passed.")
    assert [p["wave"] for p in passed] == [0, 1]
    assert done["nodes_updated"] == NODES and done["nodes_failed"] == 0
    for node in fleet:  # one accepted push per node, the new firmware running, drain released
        assert len(stack.pushes(node)) == 1, node
        comps = stack.rt.simulator.bmc(node).node.components
        assert {c.version for m, c in comps.items() if m.startswith("HGX_FW_GPU_")} == {
            NEW_GPU_VERSION
        }
        assert stack.rt.scheduler.node(node).drain is None

    (pin,) = await stack.wait("planner", "pin.changed.")
    assert pin["stack"] == {"gb200": {str(Component.GPU_VBIOS): NEW_GPU_VERSION}}

    async def pinned() -> bool:
        async with stack.apps["inventory"].require().pool.acquire() as conn:
            return any(p.stack_hash == pin["stack_hash"] for p in await state.pins(conn))

    await until(pinned, what="the inventory applied the rollout's pin")
    await stack.sweep()  # the inventory reads the fleet again, and judges it by the new pin
    async with stack.apps["inventory"].require().pool.acquire() as conn:
        status = await queries.fleet_status(conn)
        drift = await state.drift(conn, fleet)
    assert (status.total.nodes, status.total.conforming) == (NODES, NODES), status.as_json()
    for node in fleet:  # the pinned GPU VBIOS is what runs; nothing else is pinned, nor drifted
        assert {(str(i.component), str(i.kind)) for i in drift[node].items} == {
            (str(i.component), "unknown") for i in drift[node].items
        }
        assert all(i.component is not Component.GPU_VBIOS for i in drift[node].items), node


async def test_a_bad_image_trips_the_canary_gate_and_no_node_outside_the_canary_is_touched(
    stack: Stack,
) -> None:
    # The image degrades the GPUs of whichever node activates it: XID 48 and 79 in the node
    # agents' health reports, busbw under the 92% rule.
    stack.rt.simulator.set_faults(FaultPlan(faults=(Fault("degrade_health", components=("gpu",)),)))
    await stack.start_rollout()
    (canary,) = await stack.wait("planner", "wave.planned.")
    (tripped,) = await stack.wait("healthgate", "gate.tripped.")
    assert tripped["wave"] == 0 and tripped["offending_nodes"]
    assert set(tripped["offending_nodes"]) <= set(canary["node_ids"])
    (halted,) = await stack.wait("planner", "rollout.halted.")
    assert halted["wave"] == 0 and halted["halted_by"] == "gate", halted
    (done,) = await stack.wait("updater", "wave.completed.")  # in-flight steps end
    assert done["wave"] == 0
    assert await stack.emitted("planner", "rollout.completed.") == []
    assert [w["wave"] for w in await stack.emitted("planner", "wave.planned.")] == [0]
    for node in tripped["offending_nodes"]:  # the bad image did reach the canary
        assert len(stack.pushes(node)) == 1, node
    assert any(e.node_id in canary["node_ids"] for e in stack.rt.scheduler.ledger)
    outside = [n.id for n in stack.rt.fleet if n.id not in canary["node_ids"]]
    assert len(outside) == NODES - 5
    for node in outside:
        # Not one mutating call: the BMC saw only the sweeps' session logins and logouts, the
        # scheduler never cordoned or drained it.
        calls = {e["action"] for e in stack.rt.simulator.bmc(node).ledger}
        assert calls <= {"session_create", "session_delete"}, (node, calls)
        assert [e for e in stack.rt.scheduler.ledger if e.node_id == node] == [], node
