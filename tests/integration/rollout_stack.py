"""The whole rollout's test stack (issue 13), shared by the end-to-end and blast-radius tests:
attest, inventory, planner, updater and healthgate started in-process on real NATS +
PostgreSQL over one simulated fleet whose node agents publish health (``running_stack``), and
``Stack``, the handle a test drives and inspects it with (events each service committed, the BMC
ledgers, the simulated scheduler). ``dialect`` runs it on BMCs speaking one of the simulator's
Redfish dialects (``lockstep sim serve --dialect``), with the BMC profile that goes with it
named to the planner and the updater (``dialect_settings``)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
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
from lockstep_attest.testing.bundles import DriverPackage, Kit, Signer, make_kit
from lockstep_cli.polling import until
from lockstep_common import subjects
from lockstep_common.compatibility.files import packaged_rules
from lockstep_common.envelope import EventData, make_envelope
from lockstep_common.events.v1 import BundleSubmitted, IntentSubmitted, ScopeSelector, Strategy
from lockstep_common.natsconn import NatsAccess
from lockstep_common.provenance import source_for
from lockstep_common.service import ServiceApp
from lockstep_common.subjects import Namespace
from lockstep_common.vocabulary import ChangeClass, Component
from lockstep_healthgate.app import create_app as healthgate_app
from lockstep_healthgate.settings import Settings as GateSettings
from lockstep_inventory import admin
from lockstep_inventory.adapters import registry
from lockstep_inventory.app import create_app as inventory_app
from lockstep_inventory.domain.fleet_file import NodeEntry
from lockstep_inventory.settings import Settings as InventorySettings
from lockstep_inventory.sweeping import run_sweep
from lockstep_planner.app import create_app as planner_app
from lockstep_planner.settings import Settings as PlannerSettings
from lockstep_sim.dialects import DEFAULT as DEFAULT_DIALECT
from lockstep_sim.options import DEFAULT_PASSWORD, OPERATOR_USERNAME, SimOptions
from lockstep_sim.runtime import FleetRuntime
from lockstep_updater.app import create_app as updater_app
from lockstep_updater.settings import Settings as UpdaterSettings
from tests.integration.sim.pldm_fixtures import GB200_GPU, NEW_GPU_VERSION, package_for
from tests.speed import scaled

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


def planner_policy(path: Path, **routine_changes: Any) -> Path:
    """The packaged change classes, with a routine change pre-approved, a canary of 5 (the
    healthgate's minimum per stratum), one wave after it, and short soaks; ``routine_changes``
    change the routine class further (its waves, say)."""
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
    routine.update(routine_changes)
    routine["approvals"]["count"] = 0
    path.write_text(yaml.safe_dump(doc))
    return path


def packaged_timing(path: Path) -> Path:
    """The packaged change classes as shipped, but for the routine class's soaks (hours, made
    seconds here) and its approval (pre-approved: approvals are not what this tests)."""
    doc = yaml.safe_load(
        resources.files("lockstep_planner").joinpath("data/change_classes.yaml").read_bytes()
    )
    routine = doc["classes"]["routine"]
    routine.update(canary_soak_s=SOAK_S, layer_soak_s=0, wave_soak_s=SOAK_S)
    routine["approvals"]["count"] = 0
    path.write_text(yaml.safe_dump(doc))
    return path


def gate_policy(path: Path) -> Path:
    """The packaged gate policy with the smallest minimums a small fleet can meet."""
    text = resources.files("lockstep_gate").joinpath("data/default_policy.toml").read_text()
    head, _, rest = text.partition("[minimum]")
    rest = rest.split("\n[hard_rules]", 1)[1]
    path.write_text(head + GATE_POLICY + "\n[hard_rules]" + rest)
    return path


KIT_COMPONENTS = (Component.GPU_VBIOS, Component.BMC, Component.NIC, Component.BIOS)
"""The firmware a test release kit can carry (``make_kit``'s images)."""


@dataclass(frozen=True)
class KitImage:
    """The one firmware image a release kit moves the fleet to: a PLDM ``package`` of
    ``component`` (one of ``KIT_COMPONENTS``) at ``version`` that the simulated devices
    accept."""

    component: Component
    version: str
    package: bytes

    def __post_init__(self) -> None:
        if self.component not in KIT_COMPONENTS:
            raise ValueError(f"a test kit carries no {self.component} image")


GPU_IMAGE = KitImage(Component.GPU_VBIOS, NEW_GPU_VERSION, package_for(GB200_GPU, NEW_GPU_VERSION))


def release(
    tmp_path: Path,
    image: KitImage,
    *,
    name: str = "bundle",
    signer: Signer | None = None,
    driver: DriverPackage | None = None,
) -> Kit:
    """A signed release kit under ``tmp_path/release/name`` whose one firmware image is
    ``image`` (and ``driver``'s in-band step, if any); kits of one ``signer`` share a trust
    store."""
    in_band = ("driver", "gpu_gsp", "fabric_manager", "cuda", "nccl") if driver else ()
    chosen = (image.version, image.package)
    return make_kit(
        tmp_path / "release",
        gpu_image=chosen if image.component is Component.GPU_VBIOS else None,
        bmc_image=chosen if image.component is Component.BMC else None,
        nic_image=chosen if image.component is Component.NIC else None,
        bios_image=chosen if image.component is Component.BIOS else None,
        only=(str(image.component), *in_band),
        driver=driver,
        name=name,
        signer=signer,
    )


def bmc_profile_of(dialect: str) -> str:
    """The BMC profile (``lockstep_redfish/profiles``) a BMC speaking the simulator's
    ``dialect`` matches: the same name; the simulator's own is ``lockstep-sim``."""
    return "lockstep-sim" if dialect == DEFAULT_DIALECT else dialect


def dialect_settings(dialect: str, hardware: str = "gb200") -> dict[str, dict[str, Any]]:
    """What the planner and the updater are told about a fleet of ``hardware`` whose BMCs speak
    ``dialect`` (their ``bmc_profiles`` settings, LOCKSTEP_PLANNER_BMC_PROFILES and
    LOCKSTEP_UPDATER_BMC_PROFILES): the planner's reversible -> one-way ordering asks that
    profile, and the updater flashes as it says. The simulator's own dialect is left unnamed:
    the bundle's banks declaration stands, and the updater's preflight chooses."""
    if dialect == DEFAULT_DIALECT:
        return {"planner": {}, "updater": {}}
    profiles = {hardware: bmc_profile_of(dialect)}
    return {"planner": {"bmc_profiles": profiles}, "updater": {"bmc_profiles": profiles}}


class StampedLedger(list[dict[str, Any]]):
    """A BMC ledger whose entries also carry ``at_s``, the wall-clock second (``time.time()``)
    the call was recorded: the simulator's own ``time`` is whole seconds, too coarse to tell
    whether a push came within 1 s of an abort (reliability.md F6)."""

    def append(self, entry: dict[str, Any]) -> None:
        super().append({**entry, "at_s": time.time()})


@dataclass
class Stack:
    """The four services, the simulated fleet, and a NATS client on their namespace."""

    rt: FleetRuntime
    apps: dict[str, ServiceApp]
    nodes: list[NodeEntry]
    nc: NatsClient
    ns: Namespace
    bundle: Path
    signer: Signer | None = None
    """Who signed ``bundle``: ``release`` signs further kits the attest service trusts."""

    async def publish(self, subject: str, data: EventData) -> None:
        env = make_envelope(data, source=source_for(data))
        await self.nc.jetstream().publish(
            self.ns.wire(subject), env.to_json(), headers={"Nats-Msg-Id": str(env.event_id)}
        )

    async def envelopes(self, service: str, prefix: str) -> list[dict[str, Any]]:
        """Every whole envelope (``time``, ``data`` ...) ``service`` committed on ``prefix``."""
        rows = (
            await self.apps[service]
            .require()
            .pool.fetch(
                "SELECT payload FROM outbox WHERE subject LIKE $1 ORDER BY id", prefix + "%"
            )
        )
        return [json.loads(r["payload"]) for r in rows]

    async def restart(self, service: str) -> None:
        """Stop ``service`` and start a new instance of it with the same settings (a process
        killed and restarted: whatever it held in memory is gone)."""
        old = self.apps[service]
        await old.stop()
        new = FACTORIES[service](old.settings)
        self.apps[service] = new
        await new.start()

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
            return await until(
                enough, what=f"{count} {prefix} from {service}", timeout_s=scaled(40)
            )
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

    def all_pushes(self) -> list[dict[str, Any]]:
        """Every accepted push of the fleet, with its node and ``at_s``."""
        return [p for n in self.rt.fleet for p in self.pushes(n.id)]

    def pushes(self, node_id: str) -> list[dict[str, Any]]:
        """Pushes the node's BMC accepted."""
        return [
            e
            for e in self.rt.simulator.bmc(node_id).ledger
            if e["action"] == PUSH and e.get("status") == 202
        ]

    async def start_rollout(
        self, strategy: Strategy | None = None, kit: Path | None = None
    ) -> dict[str, Any]:
        """The release kit (``kit``, else the stack's own) submitted to the attest service; once
        ``bundle.attested`` reached the planner and the updater, a routine intent moving the
        whole fleet to it."""
        bundle = await self.attest_bundle(kit)
        await self.submit_intent(bundle, strategy)
        return bundle

    async def attest_bundle(self, kit: Path | None = None) -> dict[str, Any]:
        """The release kit (``kit``, else the stack's own) submitted to attest; its
        ``bundle.attested`` once the planner and the updater have recorded it."""
        count = len(await self.emitted("attest", "bundle.attested")) + 1
        await self.publish(
            subjects.bundle_submitted(),
            BundleSubmitted(bundle_uri=(kit or self.bundle).as_uri(), submitted_by="ci-job-13"),
        )
        bundle = (await self.wait("attest", "bundle.attested", count))[-1]

        async def known() -> bool:
            for name in ("planner", "updater"):
                n = await self.apps[name].require().pool.fetchval("SELECT count(*) FROM bundles")
                if n < count:
                    return False
            return True

        await until(known, what="the bundle recorded by planner and updater")
        return bundle

    async def submit_intent(self, bundle: dict[str, Any], strategy: Strategy | None = None) -> None:
        """A routine intent moving the whole fleet to ``bundle`` (with ``strategy``, if any)."""
        await self.publish(
            subjects.intent_submitted(),
            IntentSubmitted(
                intent_id=uuid.uuid4(),
                stack_hash=bundle["stack_hash"],
                scope=ScopeSelector(),
                change_class=ChangeClass.ROUTINE,
                approval_ref="CAB-1313",
                submitted_by="alice",
                strategy=strategy or Strategy(),
            ),
        )


FACTORIES: dict[str, Callable[[Any], ServiceApp]] = {
    "attest": attest_app,
    "inventory": inventory_app,
    "planner": planner_app,
    "updater": updater_app,
    "healthgate": healthgate_app,
}


async def register_fleet(rt: FleetRuntime, inventory: ServiceApp) -> list[NodeEntry]:
    """Import the simulated fleet into the inventory, every node of one supplier: one stratum,
    since the healthgate needs 5 canary and 5 control nodes per stratum, more than 10 nodes
    over the simulator's 3 suppliers hold."""
    nodes = [
        NodeEntry.model_validate(
            {
                **n.summary(rt.simulator.port),
                "credentials": "env:LOCKSTEP_TESTBMC",
                "supplier": "supplier-a",
            }
        )
        for n in rt.fleet
    ]
    async with inventory.require().pool.acquire() as conn:
        await registry.import_nodes(conn, nodes)
    return nodes


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


@asynccontextmanager
async def running_stack(
    servers: Any,
    namespace: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    updater: dict[str, Any] | None = None,
    planner: dict[str, Any] | None = None,
    routine: dict[str, Any] | None = None,
    driver: DriverPackage | None = None,
    packaged: bool = False,
    dialect: str = DEFAULT_DIALECT,
    image: KitImage = GPU_IMAGE,
) -> AsyncIterator[Stack]:
    """The five services over a fresh simulated fleet of ``NODES``, swept once; ``updater`` and
    ``planner`` override those services' settings (a scheduler, a budget, a deadline),
    ``routine`` the routine change class (``planner_policy``); ``driver`` adds that driver
    package's in-band step to the bundle, and the agents' command channel (over NATS) to the
    updater; ``packaged`` runs the packaged change classes (``packaged_timing``) and the
    packaged gate policy as shipped. ``dialect``: the Redfish dialect every BMC speaks, the
    planner and the updater told its BMC profile (``dialect_settings``); ``image``: the
    firmware the stack's release kit moves the fleet to (a GPU VBIOS by default)."""
    monkeypatch.setenv("LOCKSTEP_TESTBMC_USERNAME", OPERATOR_USERNAME)
    monkeypatch.setenv("LOCKSTEP_TESTBMC_PASSWORD", DEFAULT_PASSWORD)
    kit = release(tmp_path, image, driver=driver)
    told = dialect_settings(dialect)
    trust = tmp_path / "trust"
    trust.mkdir()
    rt = FleetRuntime(
        SimOptions(
            NODES,
            "gb200",
            dialect=dialect,
            seed=13,
            time_scale=0.002,
            host_base="127.78.0.1",
            port=0,
        ),
        scheduler_port=0,
        nats=NatsAccess.from_url(servers.nats_url),
        namespace=namespace,
        cadence_s=CADENCE_S,
        create_streams=True,
        # With a driver step the agents answer the updater's in-band commands over NATS
        # through the agent's own executor, from a repository serving the attested package.
        commands_dir=tmp_path / "agents" if driver else None,
        packages={driver.version: driver.package} if driver else None,
    )
    await rt.start()
    for node in rt.fleet:  # every mutating BMC call stamped with its wall-clock time
        rt.simulator.bmc(node.id).ledger = StampedLedger()
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
                policy_file=(
                    packaged_timing(tmp_path / "classes.yaml")
                    if packaged
                    else planner_policy(tmp_path / "classes.yaml", **(routine or {}))
                ),
                **{
                    "approvers_dir": trust,
                    "worker_poll_s": 0.05,
                    **told["planner"],
                    **(planner or {}),
                },
            )
        ),
        "updater": updater_app(
            UpdaterSettings(
                **{
                    **common(servers, namespace, "updater"),
                    "bundle_roots": [tmp_path],
                    "scheduler_url": rt.scheduler_url,
                    "worker_poll_s": 0.05,
                    "lease_s": 3.0,
                    "retry_s": 0.1,
                    "drain_poll_s": 0.05,
                    "redfish_poll_s": 0.02,
                    "verify_settle_s": 2.0,
                    **({"agent_channel": "nats"} if driver else {}),
                    **told["updater"],
                    **(updater or {}),
                }
            )
        ),
        "healthgate": healthgate_app(
            GateSettings(
                **common(servers, namespace, "healthgate"),
                policy_file=None if packaged else gate_policy(tmp_path / "gate.toml"),
                eval_poll_s=0.1,
                eval_grace_s=0.5,
                heartbeat_watch_s=0.5,
            )
        ),
    }
    started: list[str] = []
    nc = await nats.connect(servers.nats_url)
    try:
        for name, app in apps.items():
            await app.start()
            started.append(name)
        nodes = await register_fleet(rt, apps["inventory"])
        result = Stack(rt, apps, nodes, nc, Namespace(namespace), kit.bundle, kit.signer)
        await result.sweep()  # what the fleet runs now: the planner plans over it
        yield result
    finally:
        await nc.close()
        for name in reversed(started):
            app = apps[name]  # the one running now: ``Stack.restart`` replaces it
            await app.stop()
        rt.simulator.set_faults(None)
        await rt.stop()
