"""``lockstep bench plan --service``: intent in to ``rollout.planned`` out through a running
planner and a running inventory (issue 27, item 3).

Each run is in a fresh namespace and schemas, both services in this process (one event loop
with the bench, as ``bench ingest`` runs the inventory), with the services' default settings.
The fleet is ``bench_plan.fleet``'s (the same nodes, domains, pools, sites and strata as the
in-memory path), registered in the inventory with one BMC observation per node carrying its
versions (unreadable nodes unreadable; no drift is recorded, so the few nodes the in-memory path
marks drifted move too). The bundle moves ``components`` images, the first of ``MOVED`` for
each profile (NVSwitch firmware included, so whole domains move and are pinned), as
``bundle.attested``; every other pool gets a nightly window (``daily 22:00-06:00`` UTC), sent
as ``lockstep pool set`` sends it, as the in-memory path's pools have one; the packaged routine
class with approvals waived, so the rollout starts.
The intent is published as ``intent.submitted``, not asked as ``rollout.start``: the bench's
server is unauthenticated (its own, or LOCKSTEP_NATS_URL's, as the services' own integration
tests run), where it stands in for each producer, as ``admin`` may (the ``cli`` identity may
not, issue 26); the worker's claim of a published intent is the path it times, the same
planning code ``rollout.start`` runs. The clock runs from just before that publish until
``rollout.planned`` arrives on the bus: the intent consumed and recorded, the worker woken,
the fleet read over ``fleet.query`` (500 nodes a page), fabric domains learned, the plan made,
the rollout, its waves, pins and audit lines committed, and the event relayed from the outbox.

``core_s`` is ``domain.plan`` alone in the same run, on the same fleet, bundle and windows with
the same budget per pool (the in-memory path's: a tenth of a pool, at least a domain, set as
the planner's ``DEFAULT_MAX_UNAVAILABLE``); ``service_ratio`` = ``service_s / core_s``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import statistics
import time
import uuid
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import nats
import yaml
from nats.aio.msg import Msg

from lockstep_bench.plan import fleet
from lockstep_cli.polling import until
from lockstep_cli.scratch import drop_namespace
from lockstep_common import canonical, subjects
from lockstep_common.envelope import EventData, make_envelope
from lockstep_common.events.v1 import (
    AttestedComponent,
    BundleAttested,
    IntentSubmitted,
    MaintenanceWindowsRequested,
    ScopeSelector,
    Strategy,
)
from lockstep_common.maintenance import parse_schedule
from lockstep_common.provenance import source_for
from lockstep_common.subjects import Namespace
from lockstep_common.vocabulary import ChangeClass, Component, ObservationSource
from lockstep_inventory.adapters import registry, state
from lockstep_inventory.app import create_app as inventory_app
from lockstep_inventory.domain.fleet_file import NodeEntry
from lockstep_inventory.domain.observation import Observation
from lockstep_inventory.settings import Settings as InventorySettings
from lockstep_planner.adapters.policy_file import packaged_policy
from lockstep_planner.app import create_app as planner_app
from lockstep_planner.domain.fleet import Pool
from lockstep_planner.domain.intake import bundle_of
from lockstep_planner.domain.plan import PlanRequest, plan
from lockstep_planner.domain.windows import declared_windows
from lockstep_planner.handlers import rollout_id_of
from lockstep_planner.settings import Settings as PlannerSettings

# Firmware and software the compatibility table has no rule about, so the target breaks none:
# what is timed is planning, not a refusal. NVSwitch firmware makes whole domains move.
MOVED = (
    Component.BMC,
    Component.BIOS,
    Component.GPU_VBIOS,
    Component.NVSWITCH,
    Component.NIC,
    Component.OPTICS,
    Component.CPLD,
    Component.EROT,
    Component.KERNEL,
    Component.CONTAINER_TOOLKIT,
)
OLD, OLDER, TARGET = "1.0", "0.9", "2.0"
NIGHTLY = "daily 22:00-06:00"


@dataclass(frozen=True)
class RunResult:
    service_s: float
    core_s: float
    waves: int
    nodes: int


def _bundle(profiles: list[str], components: int) -> BundleAttested:
    """``components`` images dealt over the profiles (the first ``len(MOVED)`` per profile)."""
    per = max(1, -(-components // len(profiles)))
    parts = [
        AttestedComponent(
            profile=profile,
            component=c,
            version=TARGET,
            image=f"images/{profile}-{c}-{TARGET}.bin",
            sha384="0" * 96,
            size=1,
            banks="ab",
            activation="reset",
        )
        for profile in profiles
        for c in MOVED[:per]
    ][:components]
    stack: dict[str, dict[str, str]] = {}
    for p in parts:
        stack.setdefault(p.profile, {})[str(p.component)] = p.version
    return BundleAttested(
        bundle_id="bench-plan",
        bundle_version="1",
        stack_hash=canonical.stack_hash(stack),
        checks=(),
        bundle_uri="file:///bundles/bench-plan",
        components=tuple(parts),
    )


def _registered(nodes: int, domains: int) -> tuple[list[NodeEntry], list[tuple[str, Observation]]]:
    """``bench_plan.fleet`` as the inventory holds it: entries and one BMC report each."""
    planned, _ = fleet(nodes, domains)
    now = dt.datetime.now(dt.UTC)
    entries, reports = [], []
    for n in planned:
        entries.append(
            NodeEntry(
                id=n.id,
                bmc_url=f"https://bmc-{n.id}.bench",
                profile=n.profile,
                supplier=n.supplier,
                site=n.site,
                rack=n.rack,
                fabric_domain=n.fabric_domain or "",
                pool=n.pool,
                credentials="env:BENCH_BMC",
                power_side=str(n.power_side),
            )
        )
        version = OLDER if n.stack == "b" * 64 else OLD
        reports.append(
            (
                n.id,
                Observation(
                    ObservationSource.REDFISH,
                    sequence=1,
                    observed_at=now,
                    readable=n.readable,
                    components=dict.fromkeys(MOVED, version),
                ),
            )
        )
    return entries, reports


def _policy(path: Path) -> Path:
    """The packaged policy with routine pre-approved: the run ends at ``rollout.planned``,
    which is emitted either way, and the start adds the first wave's release to it."""
    doc = yaml.safe_load(
        resources.files("lockstep_planner").joinpath("data/change_classes.yaml").read_bytes()
    )
    doc["classes"]["routine"]["approvals"]["count"] = 0
    path.write_text(yaml.safe_dump(doc))
    return path


async def one_run(
    nats_url: str, database_url: str, nodes: int, domains: int, components: int, work: Path
) -> RunResult:
    """One intent planned by the running planner, and the core on the same model."""
    namespace = f"bp{uuid.uuid4().hex[:8]}"
    ns = Namespace(namespace)
    common: dict[str, Any] = {
        "nats_url": nats_url,
        "database_url": database_url,
        "namespace": namespace,
        # The services' own defaults otherwise: what a deployment runs.
        "shutdown_grace_s": 5,
        "log_json": False,
    }
    inventory = inventory_app(
        InventorySettings(**common, db_schema=f"{namespace}_inventory", sweep_interval_s=0)
    )
    planner = planner_app(
        PlannerSettings(
            refuse_unjudgeable=False,  # the generated fleet's strata are small: timing only
            **common,
            db_schema=f"{namespace}_planner",
            policy_file=_policy(work / f"{namespace}.yaml"),
            default_max_unavailable=_budget(nodes, domains),
        )
    )
    nc = await nats.connect(nats_url)
    planned: asyncio.Future[float] = asyncio.get_running_loop().create_future()

    async def heard(msg: Msg) -> None:
        if not planned.done():
            planned.set_result(time.perf_counter())

    try:
        await inventory.start()
        entries, reports = _registered(nodes, domains)
        async with inventory.require().pool.acquire() as conn:
            await registry.import_nodes(conn, entries)
            await state.save_observations(conn, reports)
        await planner.start()
        bundle = _bundle(sorted({e.profile for e in entries}), components)
        await _publish(nc, ns, subjects.bundle_attested(), bundle)

        async def known() -> bool:
            return bool(await planner.require().pool.fetchval("SELECT count(*) FROM bundles"))

        await until(known, what="bundle recorded")
        # Every other pool open only at night, as the in-memory path's are, set as operators
        # set them (`lockstep pool set`).
        nightly = sorted({e.pool for e in entries})[1::2]
        for pool in nightly:
            await _publish(nc, ns, subjects.maintenance_requested(), _nightly(pool))

        async def windows_kept() -> bool:
            held = await planner.require().pool.fetchval("SELECT count(*) FROM maintenance_windows")
            return bool(held == len(nightly))

        await until(windows_kept, what="maintenance windows recorded")
        data = IntentSubmitted(
            intent_id=uuid.uuid4(),
            stack_hash=bundle.stack_hash,
            scope=ScopeSelector(),
            change_class=ChangeClass.ROUTINE,
            submitted_by="bench",
            strategy=Strategy(),
        )
        sub = await nc.subscribe(
            ns.wire(subjects.rollout_planned(rollout_id_of(data.intent_id))), cb=heard
        )
        started = time.perf_counter()
        await _publish(nc, ns, subjects.intent_submitted(), data)
        done = await asyncio.wait_for(planned, timeout=600)
        await sub.unsubscribe()
        row = await planner.require().pool.fetchrow(
            "SELECT state, reasons FROM intents WHERE intent_id = $1", data.intent_id
        )
        if row is None or row["state"] != "planned":
            raise RuntimeError(f"the intent was not planned: {row and row['reasons']}")
        waves = await planner.require().pool.fetchval(
            "SELECT count(*) FROM waves WHERE rollout_id = $1", rollout_id_of(data.intent_id)
        )
        moved = await planner.require().pool.fetchval("SELECT count(*) FROM rollout_nodes")
        core = _core(nodes, domains, bundle, _budget(nodes, domains), nightly)
        return RunResult(done - started, core, int(waves), int(moved))
    finally:
        await planner.stop()
        await inventory.stop()
        await nc.close()
        await drop_namespace(nats_url, database_url, namespace)


def _budget(nodes: int, domains: int) -> int:
    """The in-memory path's budget (a tenth of a pool, at least a whole domain), as the
    operator's setting: its pools are the same size to within a node."""
    _, pools = fleet(nodes, domains)
    return min(p.max_unavailable for p in pools.values())


def _nightly(pool: str) -> MaintenanceWindowsRequested:
    return MaintenanceWindowsRequested(
        scope="pool", name=pool, windows=(NIGHTLY,), requested_by="bench"
    )


def _core(
    nodes: int, domains: int, bundle: BundleAttested, default_cap: int, nightly: list[str]
) -> float:
    """The in-memory core (``domain.plan``) on the same fleet, bundle, budgets and windows."""
    planned, pools = fleet(nodes, domains)
    policy = packaged_policy()[ChangeClass.ROUTINE]
    now = dt.datetime.now(dt.UTC)
    declared = {("pool", p): parse_schedule([NIGHTLY]) for p in nightly}
    windows = declared_windows(planned, declared, now=now)
    request = PlanRequest(
        fleet=planned,
        pools={name: Pool(name, default_cap, windows[name]) for name in pools},
        bundle=bundle_of(bundle.stack_hash, bundle.components),
        scope=ScopeSelector(),
        change_class=ChangeClass.ROUTINE,
        policy=policy,
        seed="bench",
    )
    started = time.perf_counter()
    plan(request, now=now)
    return time.perf_counter() - started


async def _publish(nc: Any, ns: Namespace, subject: str, data: EventData) -> None:
    env = make_envelope(data, source=source_for(data))
    await nc.jetstream().publish(
        ns.wire(subject), env.to_json(), headers={"Nats-Msg-Id": str(env.event_id)}
    )


async def run_service_bench(
    nats_url: str, database_url: str, nodes: int, domains: int, components: int, runs: int
) -> dict[str, Any]:
    """``runs`` runs; medians, and per-run figures beside them."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="lockstep-bench-plan-") as work:
        results = [
            await one_run(nats_url, database_url, nodes, domains, components, Path(work))
            for _ in range(runs)
        ]
    service = round(statistics.median(r.service_s for r in results), 3)
    core = round(statistics.median(r.core_s for r in results), 3)
    return {
        "service_s": service,
        "core_s": core,
        "service_ratio": round(service / core, 1) if core else None,
        "service_runs": [round(r.service_s, 3) for r in results],
        "core_runs": [round(r.core_s, 3) for r in results],
        "service_waves": results[0].waves,
        "service_nodes": results[0].nodes,
    }
