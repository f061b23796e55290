"""The GSP / driver runbook (seed 004) and the in-band step in the updater service, on real NATS
and PostgreSQL, the inventory answering fleet.query and the simulator's node agents (the agent's
own command channel and executor, on ``agent.command.<site>.<node>``), BMCs and scheduler: a
``drift.detected`` of kind gsp_mismatch realigns the node end to end; Secure Boot rejection
quarantines it; an updater restarted mid-runbook does not reinstall (the agent's ledger); a
rollout's driver, CUDA and NCCL are installed through the agent after its firmware."""

from __future__ import annotations

import asyncio
import hashlib
import json
import uuid
from dataclasses import replace
from typing import Any

import nats
import pytest

from lockstep_cli.polling import until
from lockstep_common import subjects
from lockstep_common.envelope import make_envelope
from lockstep_common.events import REGISTRY
from lockstep_common.events.v1 import (
    AttestedComponent,
    BundleAttested,
    DriftDetected,
    DriftItem,
    NodeApproveRemedyRequested,
    OpsRefused,
    RolloutPlanned,
    WavePlan,
    WavePlanned,
)
from lockstep_common.identities import READER
from lockstep_common.vocabulary import ChangeClass, Component, DriftKind, Severity
from lockstep_sim.agents.commands import package_bytes
from lockstep_sim.agents.software import NodeSoftware
from lockstep_sim.agents.state import Phase
from lockstep_updater.adapters.gauges import GAUGES
from lockstep_updater.adapters.node_agent_nats import NatsNodeAgent
from lockstep_updater.domain.inband import AgentState
from lockstep_updater.ports import OWNER, AgentOrder, AgentUnavailable
from tests.integration.sim.pldm_fixtures import NEW_GPU_VERSION
from tests.integration.updater.test_updater_service import STACK, Rig, lockstep, rig

pytestmark = pytest.mark.integration
__all__ = ["rig"]  # the fixture, shared with the updater service's tests
OLD, NEW = "580.65.06", "580.95.05"


def break_gsp(r: Rig, node: str) -> NodeSoftware:
    """Seed 004's trigger: an interrupted upgrade to NEW left no /lib/firmware/nvidia/NEW/."""
    software = r.rt.software[node]
    knobs = software.faults
    software.faults = replace(knobs, missing_firmware_dir=True)
    software.install_driver(NEW)
    software.reboot()
    software.faults = knobs
    assert software.phase is Phase.GSP_MISMATCH
    return software


DRIVER_BUNDLES = {"1" * 64: OLD, "2" * 64: NEW}
"""The bundles that attested the driver packages of OLD, then NEW (the runbook's pin and
fallback are installed from these only)."""


async def start(r: Rig, **extra: Any) -> Any:
    """An updater sending in-band commands over NATS, every simulated node's agent answering
    them, and the driver packages of OLD and NEW attested and recorded."""
    for node in r.rt.fleet:
        if node.id not in r.rt.command_hosts:
            await r.rt.answer_commands(r.nc, r.ns, node.id)
    for stack, version in DRIVER_BUNDLES.items():
        package = package_bytes(version)
        image = f"images/driver-{version}.deb"
        (r.bundle / image).write_bytes(package)
        driver = AttestedComponent(
            profile="gb200",
            component=Component.DRIVER,
            version=version,
            image=image,
            sha384=hashlib.sha384(package).hexdigest(),
            size=len(package),
            banks="one_way",
            activation="in_band",
        )
        attested = BundleAttested(
            bundle_id="gb200-driver",
            bundle_version=version,
            stack_hash=stack,
            checks=(),
            bundle_uri=str(r.bundle),
            components=(driver,),
        )
        await r.publish(subjects.bundle_attested(), attested)
    app = await r.start_updater(agent_channel="nats", **extra)

    async def recorded() -> bool:
        count = await app.require().pool.fetchval(
            "SELECT count(*) FROM bundles WHERE stack_hash = ANY($1::text[])",
            list(DRIVER_BUNDLES),
        )
        return bool(count == len(DRIVER_BUNDLES))

    await until(recorded, what="the driver bundles recorded", timeout_s=60)
    return app


async def report_drift(r: Rig, node: str) -> None:
    site = next(n.site for n in r.rt.fleet if n.id == node)
    await r.publish(
        subjects.drift_detected(site, node),
        DriftDetected(
            node_id=node,
            site=site,
            stack_hash=None,
            items=(
                DriftItem(
                    component=Component.GPU_GSP,
                    expected=NEW,
                    actual=None,
                    kind=DriftKind.GSP_MISMATCH,
                    severity=Severity.CRITICAL,
                    detail=f"no /lib/firmware/nvidia/{NEW}/ for the loaded module",
                ),
            ),
        ),
    )


def agent_ledger(r: Rig, node: str) -> list[str]:
    """The steps the node's agent carried out, in order (the simulator's ``agent_ledger``)."""
    return [e["step"] for e in r.rt.agent_ledger if e["node"] == node and e["outcome"] != "refused"]


async def item(r: Rig, node: str) -> dict[str, Any]:
    row = await r.inventory.require().pool.fetchrow(
        f'SELECT kind, state, reason, progress FROM "{r.namespace}_updater".node_work'
        " WHERE node_id = $1 ORDER BY id DESC LIMIT 1",
        node,
    )
    return {} if row is None else {**dict(row), "progress": json.loads(row["progress"])}


async def test_a_gsp_mismatch_reported_as_drift_is_realigned_end_to_end(rig: Rig) -> None:
    r = rig
    node = r.rt.fleet[0].id
    software = break_gsp(r, node)
    app = await start(r)
    await report_drift(r, node)
    await report_drift(r, node)  # the inventory saying it twice adds nothing

    async def verified() -> list[dict[str, Any]]:
        return await r.emitted(app, "device.verified.")

    (event,) = await until(verified, what="device.verified of the driver", timeout_s=60)
    assert (event["node_id"], event["component"], event["to_version"]) == (node, "driver", NEW)
    assert event["rollout_id"].startswith("remedy-")

    async def given_back() -> bool:
        return (await item(r, node)).get("state") == "done"

    await until(given_back, what="the node given back", timeout_s=60)
    assert (await item(r, node))["kind"] == "remedy"
    assert (software.state.loaded_module, software.state.gsp_firmware) == (NEW, NEW)
    assert software.diag_passes()
    assert agent_ledger(r, node) == ["install-driver", "reboot"]
    owned = [e.action for e in r.rt.scheduler.ledger if e.node_id == node and e.by == OWNER]
    assert owned == ["drain", "resume"] and r.rt.scheduler.node(node).drain is None
    count = await r.inventory.require().pool.fetchval(
        f'SELECT count(*) FROM "{r.namespace}_updater".node_work'
    )
    assert count == 1
    # lockstep node history: the runbook's steps, each with its fencing token.
    r.monkeypatch.setenv("LOCKSTEP_NATS_URL", r.servers.nats_url)
    r.monkeypatch.setenv("LOCKSTEP_NAMESPACE", r.namespace)
    # The updater answers over the bus: the CLI has no database to reach.
    r.monkeypatch.setenv("LOCKSTEP_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    r.monkeypatch.setenv("LOCKSTEP_UPDATER_DB_SCHEMA", f"{r.namespace}_updater")
    code, out = await asyncio.to_thread(lockstep, "node", "history", node, "--json")
    assert code == 0, out
    moves = [(s["step"], s["outcome"]) for s in json.loads(out) if s["step"] != s["outcome"]]
    assert moves == [
        ("preflight", "cordoning"),
        ("cordoning", "draining"),
        ("draining", "in_band"),
        ("in_band", "uncordoning"),
        ("uncordoning", "done"),
    ]
    # Nothing waits for approval under the automatic policy: one clear line, exit 2.
    code, out = await asyncio.to_thread(lockstep, "node", "approve-remedy", node)
    assert code == 2 and f"no GSP remedy waits for approval on {node}" in out
    code, out = await asyncio.to_thread(lockstep, "node", "approve-remedy", "bad node")
    assert code == 2 and "cannot be a NATS subject token" in out and "Traceback" not in out


async def test_under_approval_the_cli_releases_the_runbook(rig: Rig) -> None:
    r = rig
    node = r.rt.fleet[1].id
    software = break_gsp(r, node)
    app = await start(r, gsp_remedy="approval")
    await report_drift(r, node)

    async def held() -> bool:
        return (await item(r, node)).get("state") == "pending"

    await until(held, what="the runbook held for approval", timeout_s=60)
    assert agent_ledger(r, node) == []
    r.monkeypatch.setenv("LOCKSTEP_NATS_URL", r.servers.nats_url)
    r.monkeypatch.setenv("LOCKSTEP_NAMESPACE", r.namespace)
    # The updater answers over the bus: the CLI has no database to reach.
    r.monkeypatch.setenv("LOCKSTEP_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    r.monkeypatch.setenv("LOCKSTEP_UPDATER_DB_SCHEMA", f"{r.namespace}_updater")
    # The reader may look, not approve: refused, recorded, still held.
    nc = await nats.connect(r.servers.nats_url)
    try:
        subject = f"{r.namespace}.{subjects.ops_request(READER, 'updater', 'node.approve-remedy')}"
        body = make_envelope(NodeApproveRemedyRequested(node_id=node), source="/t").to_json()
        refused = REGISTRY.decode(
            (await nc.request(subject, body, timeout=10)).data, max_bytes=1 << 20
        )
    finally:
        await nc.close()
    assert isinstance(refused.data, OpsRefused) and refused.data.kind == "forbidden"
    assert (await item(r, node)).get("state") == "pending"
    code, out = await asyncio.to_thread(lockstep, "node", "approve-remedy", node)
    assert code == 0 and "GSP remedy approved" in out, out
    audit = await r.inventory.require().pool.fetch(
        f'SELECT identity, command, outcome FROM "{r.namespace}_updater".operator_requests'
        " ORDER BY asked_at"
    )
    assert [tuple(a) for a in audit] == [
        (READER, "node.approve-remedy", "refused"),
        ("cli", "node.approve-remedy", "done"),
    ]

    async def verified() -> list[dict[str, Any]]:
        return await r.emitted(app, "device.verified.")

    await until(verified, what="device.verified after the approval", timeout_s=60)
    assert software.state.loaded_module == NEW and software.diag_passes()


async def test_secure_boot_rejection_quarantines_with_the_reason(rig: Rig) -> None:
    r = rig
    node = r.rt.fleet[1].id
    software = break_gsp(r, node)
    software.faults = replace(software.faults, secure_boot_rejects_module=True)
    app = await start(r)
    await report_drift(r, node)

    async def failed() -> list[dict[str, Any]]:
        return await r.emitted(app, "device.failed.")

    (event,) = await until(failed, what="device.failed", timeout_s=60)
    assert event["step"] == "in_band" and "Secure Boot rejected" in event["reason"]
    quarantined = await item(r, node)
    assert quarantined["state"] == "quarantined" and "not retried" in quarantined["reason"]
    assert agent_ledger(r, node) == ["install-driver", "reboot"]  # no second branch
    drain = r.rt.scheduler.node(node).drain
    assert drain is not None and drain.by == OWNER  # kept out of service, with the reason


async def quarantined_gauge(r: Rig) -> float:
    (gauge,) = [g for g in GAUGES if g.name == "lockstep_updater_quarantined_nodes"]
    async with r.inventory.require().pool.acquire() as conn, conn.transaction():
        await conn.execute(f'SET LOCAL search_path TO "{r.namespace}_updater"')
        return float(await conn.fetchval(gauge.sql))


async def test_a_quarantined_node_is_counted_until_an_operator_releases_it(rig: Rig) -> None:
    r = rig
    node = r.rt.fleet[1].id
    software = break_gsp(r, node)
    software.faults = replace(software.faults, secure_boot_rejects_module=True)
    await start(r)
    await report_drift(r, node)

    async def quarantined() -> bool:
        return (await item(r, node)).get("state") == "quarantined"

    await until(quarantined, what="the node quarantined", timeout_s=60)
    assert await quarantined_gauge(r) == 1  # LockstepNodesQuarantined reads this
    r.monkeypatch.setenv("LOCKSTEP_NATS_URL", r.servers.nats_url)
    r.monkeypatch.setenv("LOCKSTEP_NAMESPACE", r.namespace)
    # The updater answers over the bus: the CLI has no database to reach.
    r.monkeypatch.setenv("LOCKSTEP_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    r.monkeypatch.setenv("LOCKSTEP_UPDATER_DB_SCHEMA", f"{r.namespace}_updater")
    # Bad input: one line, exit 2, nothing recorded.
    code, out = await asyncio.to_thread(lockstep, "node", "release", node, "--reason", "  ")
    assert code == 2 and "--reason must say why" in out and "Traceback" not in out
    other = r.rt.fleet[0].id
    code, out = await asyncio.to_thread(lockstep, "node", "release", other, "--reason", "x")
    assert code == 2 and f"the updater has no work recorded for {other}" in out
    assert (await item(r, node))["state"] == "quarantined"

    why = "GPU reseated, dcgmi diag -r 3 passed"
    code, out = await asyncio.to_thread(lockstep, "node", "release", node, "--reason", why)
    assert code == 0 and f"{node}: release release-" in out, out

    async def given_back() -> bool:
        latest = await item(r, node)
        return bool(latest["kind"] == "release" and latest["state"] == "done")

    await until(given_back, what="the release done", timeout_s=60)
    assert r.rt.scheduler.node(node).drain is None  # Lockstep's drain given back
    assert await quarantined_gauge(r) == 0
    latest = await item(r, node)
    assert latest["reason"].startswith("released by ") and latest["reason"].endswith(why)
    code, out = await asyncio.to_thread(lockstep, "node", "release", node, "--reason", why)
    assert code == 2 and "is not quarantined (its latest work item, kind release, is done)" in out


async def test_an_updater_restarted_mid_runbook_does_not_reinstall(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    r = rig
    node = r.rt.fleet[2].id
    software = break_gsp(r, node)
    reboot = NatsNodeAgent.reboot
    down = asyncio.Event()
    down.set()

    async def flaky_reboot(self: NatsNodeAgent, order: AgentOrder) -> AgentState:
        if order.node_id == node and down.is_set():
            # no agent listening: the updater retries the step
            raise AgentUnavailable(f"no agent of {node} listens")
        return await reboot(self, order)

    monkeypatch.setattr(NatsNodeAgent, "reboot", flaky_reboot)
    first = await start(r, retry_s=0.5)
    await report_drift(r, node)

    async def installed_and_waiting() -> bool:
        now = await item(r, node)
        return now.get("state") == "in_band" and "install-driver" in agent_ledger(r, node)

    await until(
        installed_and_waiting, what="the driver installed, the reboot pending", timeout_s=60
    )
    await first.stop()  # mid-runbook: installed, not rebooted
    r.updaters.remove(first)
    assert (await item(r, node))["state"] == "in_band"
    down.clear()
    second = await start(r)

    async def verified() -> list[dict[str, Any]]:
        return await r.emitted(second, "device.verified.")

    await until(verified, what="device.verified after the restart", timeout_s=60)

    async def given_back() -> bool:
        return (await item(r, node)).get("state") == "done"

    await until(given_back, what="the node given back", timeout_s=60)
    assert agent_ledger(r, node) == ["install-driver", "reboot"]  # installed once
    assert software.state.loaded_module == NEW and r.rt.scheduler.node(node).drain is None


async def test_a_rollouts_driver_cuda_and_nccl_are_installed_through_the_agent(rig: Rig) -> None:
    r = rig
    node = r.rt.fleet[3].id
    gpu = (r.bundle / "images" / "gpu.fwpkg").read_bytes()
    package = package_bytes(NEW)  # what the simulated repository serves
    (r.bundle / "images" / "driver.run").write_bytes(package)

    def part(component: Component, version: str, image: str, data: bytes, banks: str) -> Any:
        return AttestedComponent(
            profile="gb200",
            component=component,
            version=version,
            image=image,
            sha384=hashlib.sha384(data).hexdigest(),
            size=len(data),
            banks=banks,
            activation="reset" if banks == "ab" else "in_band",
        )

    in_band = (
        part(Component.DRIVER, NEW, "images/driver.run", package, "one_way"),
        # CUDA user space and the NCCL pairing ride in the driver package: the versions it
        # brings (the simulator's 580 release: CUDA 13.0, NCCL 2.27.7).
        part(Component.CUDA, "13.0", "images/driver.run", package, "one_way"),
        part(Component.NCCL, "2.27.7", "images/driver.run", package, "one_way"),
    )
    await r.publish(
        subjects.bundle_attested(),
        BundleAttested(
            bundle_id="gb200-fw",
            bundle_version="2026.11",
            stack_hash=STACK,
            checks=(),
            bundle_uri=str(r.bundle),
            components=(
                part(Component.GPU_VBIOS, NEW_GPU_VERSION, "images/gpu.fwpkg", gpu, "ab"),
                *in_band,
            ),
        ),
    )
    await r.publish(
        subjects.rollout_planned("r-driver"),
        RolloutPlanned(
            rollout_id="r-driver",
            intent_id=uuid.uuid4(),
            stack_hash=STACK,
            change_class=ChangeClass.STANDARD,
            waves=(WavePlan(number=0, node_ids=(node,)),),
        ),
    )
    app = await start(r)
    await r.publish(
        subjects.wave_planned("r-driver"),
        WavePlanned(
            rollout_id="r-driver",
            wave=0,
            node_ids=(node,),
            components=(Component.GPU_VBIOS, Component.DRIVER, Component.CUDA, Component.NCCL),
            max_unavailable=1,
            failure_budget=0,
            soak_seconds=0,
        ),
    )

    async def completed() -> list[dict[str, Any]]:
        return await r.emitted(app, "wave.completed.")

    (done,) = await until(completed, what="wave.completed", timeout_s=60)
    assert done["succeeded"] == [node], await item(r, node)
    verified = {v["component"]: v["to_version"] for v in await r.emitted(app, "device.verified.")}
    assert verified == {
        "gpu_vbios": NEW_GPU_VERSION,
        "driver": NEW,
        "cuda": "13.0",
        "nccl": "2.27.7",
    }
    assert len(r.pushes(node)) == 1  # the firmware through the BMC, once
    assert agent_ledger(r, node) == ["install-driver", "reboot"]  # one package, once
    software = r.rt.software[node]
    assert (software.state.loaded_module, software.state.gsp_firmware) == (NEW, NEW)
    assert r.rt.scheduler.node(node).drain is None
