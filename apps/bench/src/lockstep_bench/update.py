"""``lockstep bench update``: the updater's executor driving a wave on the simulator.

- **makespan**: one wave of ``nodes`` gb200 nodes (GPU VBIOS, A/B: staged while the node
  works, then cordon, drain, activate, verify, give back) with ``max_unavailable`` per pool,
  run by ``workers`` concurrent claim loops of the real executor against the simulator's BMCs
  and scheduler, at the simulator's scaled clock. Its lower bound is set by the budget and the
  simulator's seed durations (profiles.py: GPU stage and activate minutes, per member, one
  flash at a time per BMC): every node stages in parallel, then each pool passes its nodes
  through activation ``max_unavailable`` at a time. ``makespan_ratio = makespan / bound``
  (goal <= 1.15).
- **halt**: the same wave with a halt committed once the first node is drained;
  ``halt_s`` is the time from that commit to the last mutating call any BMC or the scheduler
  recorded afterwards (0 when none started after it; goal <= 1 s).

The state is the in-memory store on a running clock (``lockstep_updater.testing``), so the
figures are the executor's, the Redfish client's and the simulator's, not PostgreSQL's.

- **push**: image push throughput to every BMC of a third fleet (in a child process),
  ``lockstep_redfish`` against a raw ``aiohttp`` multipart client (``bench_push``);
  ``push_ratio`` (goal >= 0.8).
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import tempfile
import time
import uuid
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lockstep_bench.push import run_push
from lockstep_common.envelope import make_envelope, source_of
from lockstep_common.events.v1 import (
    AttestedComponent,
    RolloutHalted,
    RolloutPlanned,
    WavePlan,
    WavePlanned,
)
from lockstep_common.pldm import ComponentSpec, RecordSpec, build_package
from lockstep_common.pldm.header import FormatRevision
from lockstep_common.vocabulary import ChangeClass, Component
from lockstep_redfish import RetryPolicy
from lockstep_redfish.tasks import TaskPolicy
from lockstep_redfish.update import UpdatePolicy
from lockstep_sim.options import DEFAULT_PASSWORD, OPERATOR_USERNAME, SimOptions
from lockstep_sim.profiles import GB200
from lockstep_sim.runtime import FleetRuntime
from lockstep_updater.adapters.sim_scheduler import SimScheduler
from lockstep_updater.domain.remedy import RemedyPolicy
from lockstep_updater.domain.steps import TERMINAL
from lockstep_updater.executor import ExecutorPolicy
from lockstep_updater.handlers import Handlers
from lockstep_updater.ports import DrainState, Scheduler
from lockstep_updater.testing.memory_store import MemoryStore
from lockstep_updater.testing.sim_fleet import SimFacts, sim_executor

HANDLERS = Handlers(RemedyPolicy.AUTOMATIC)

GPU = next(c for c in GB200 if c.kind == "gpu")
VERSION = "97.00.9A.00.01"
STACK = "f" * 64
SOURCE = source_of("bench")
MUTATING = frozenset(
    {
        "update-multipart",
        "upload",
        "UpdateService.Activate",
        "SoftwareInventory.Activate",
        "Chassis.Reset",
        "ComputerSystem.Reset",
        "Manager.Reset",
    }
)
ENV = {"BENCHBMC_USERNAME": OPERATOR_USERNAME, "BENCHBMC_PASSWORD": DEFAULT_PASSWORD}


def gpu_package(payload_bytes: int = 4096) -> bytes:
    """A PLDM package moving every GB200 GPU's VBIOS to ``VERSION`` (the simulator accepts it),
    its component image ``payload_bytes`` long."""
    descriptors = [(0x0000, GPU.pci_vendor), (0x0100, GPU.pci_device)]
    return build_package(
        revision=FormatRevision.V1_0,
        version=f"bench-{VERSION}",
        release_time=datetime(2026, 11, 1, tzinfo=UTC),
        components=[
            ComponentSpec(
                image=b"\x5a" * payload_bytes, identifier=GPU.pldm_component_id, version=VERSION
            )
        ],
        device_records=[
            RecordSpec(descriptors=descriptors, applicable_components=[0], version=VERSION)
        ],
    )


def _policy(time_scale: float) -> ExecutorPolicy:
    poll = time_scale / 2  # half a simulated minute: well under every seed duration
    return ExecutorPolicy(
        lease_s=600.0,
        retry_s=poll,
        drain_poll_s=poll,
        budget_recheck_s=time_scale,  # the service's minute, simulated
        task_hold_s=time_scale,
        update=UpdatePolicy(
            tasks=TaskPolicy(poll_s=poll, min_poll_s=poll, max_poll_s=poll * 4),
            resend=RetryPolicy(backoff_s=poll, max_retry_after_s=1.0),
            settle_s=5.0,
            reachable_s=30.0,
            read_poll_s=poll,
        ),
        transport=RetryPolicy(timeout_s=10, retries=2, backoff_s=poll),
    )


STAMP = "bench_t"


class _Stamped(list[dict[str, Any]]):
    """A BMC ledger that notes when (``time.time()``) each entry was recorded."""

    def append(self, entry: dict[str, Any]) -> None:
        entry[STAMP] = time.time()
        super().append(entry)


class _HaltOnFirstDrain:
    """The simulator's scheduler; the rollout is halted the moment a node is drained."""

    def __init__(self, inner: Scheduler, store: MemoryStore, rollout: str) -> None:
        self.inner, self.store, self.rollout = inner, store, rollout
        self.halted_at: float | None = None

    async def cordon(self, node_id: str, reason: str) -> None:
        await self.inner.cordon(node_id, reason)

    async def drain_state(self, node_id: str) -> DrainState:
        state = await self.inner.drain_state(node_id)
        if state is DrainState.DRAINED and self.halted_at is None:
            halt = RolloutHalted(rollout_id=self.rollout, wave=0, reason="bench", halted_by="gate")
            async with self.store.transaction() as tx:
                await HANDLERS.rollout_halted(
                    tx, make_envelope(halt, source=SOURCE), now=datetime.now(UTC)
                )
            self.halted_at = time.time()
        return state

    async def resume(self, node_id: str) -> bool:
        return await self.inner.resume(node_id)


async def _wave(
    nodes: int,
    budget: int,
    workers: int,
    time_scale: float,
    *,
    halt: bool,
    host: str,
    dialect: str = "lockstep",
) -> dict[str, Any]:
    image = gpu_package()
    with tempfile.TemporaryDirectory(prefix="lockstep-bench-update-") as tmp:
        bundle = Path(tmp) / "bundle"
        (bundle / "images").mkdir(parents=True)
        (bundle / "images" / "gpu.fwpkg").write_bytes(image)
        rt = FleetRuntime(
            SimOptions(
                nodes, "gb200", dialect=dialect, time_scale=time_scale, host_base=host, port=0
            ),
            scheduler_port=0,
        )
        await rt.start()
        for bmc in rt.simulator.bmcs.values():
            bmc.ledger = _Stamped()  # the ledger's own times are whole seconds
        try:
            return await _drive(rt, bundle, image, budget, workers, time_scale, halt=halt)
        finally:
            await rt.stop()


async def _drive(
    rt: FleetRuntime,
    bundle: Path,
    image: bytes,
    budget: int,
    workers: int,
    time_scale: float,
    *,
    halt: bool,
) -> dict[str, Any]:
    store = MemoryStore(source=SOURCE, clock=lambda: datetime.now(UTC))
    rollout = f"bench-{uuid.uuid4().hex[:8]}"
    node_ids = tuple(n.id for n in rt.fleet)
    component = AttestedComponent(
        profile="gb200",
        component=Component.GPU_VBIOS,
        version=VERSION,
        image="images/gpu.fwpkg",
        sha384=hashlib.sha384(image).hexdigest(),
        size=len(image),
        banks="ab",
        activation="reset",
    )
    planned = RolloutPlanned(
        rollout_id=rollout,
        intent_id=uuid.uuid4(),
        stack_hash=STACK,
        change_class=ChangeClass.STANDARD,
        waves=(WavePlan(number=0, node_ids=node_ids),),
    )
    wave = WavePlanned(
        rollout_id=rollout,
        wave=0,
        node_ids=node_ids,
        components=(Component.GPU_VBIOS,),
        max_unavailable=budget,
        failure_budget=len(node_ids),
        soak_seconds=0,
    )
    async with store.transaction() as tx:
        await tx.record_bundle(STACK, str(bundle), (component,))
        await HANDLERS.rollout_planned(
            tx, make_envelope(planned, source=SOURCE), now=datetime.now(UTC)
        )
        await HANDLERS.wave_planned(tx, make_envelope(wave, source=SOURCE), now=datetime.now(UTC))
    policy = _policy(time_scale)
    scheduler: Scheduler = SimScheduler(rt.scheduler_url)
    halter = _HaltOnFirstDrain(scheduler, store, rollout) if halt else None
    facts = SimFacts(rt, credentials="BENCHBMC")
    executor = sim_executor(rt, store, facts, bundle, policy, ENV, scheduler=halter or scheduler)

    def finished() -> bool:
        return all(i.state in TERMINAL for i in store.items)

    async def loop() -> None:
        while not finished():
            if not await executor.step():
                await asyncio.sleep(policy.retry_s)  # nothing claimable: a poll, as the service

    started = time.perf_counter()
    await asyncio.gather(*(loop() for _ in range(workers)))
    makespan = time.perf_counter() - started
    await executor.close()  # the BMC sessions of nodes that did not reach an end
    states = Counter(i.state.value for i in store.items)
    result: dict[str, Any] = {"makespan_s": round(makespan, 3), "states": dict(states)}
    if halter is not None and halter.halted_at is not None:
        last = max(
            (
                float(e[STAMP])
                for n in node_ids
                for e in rt.simulator.bmc(n).ledger
                if e["action"] in MUTATING and STAMP in e
            ),
            default=halter.halted_at,
        )
        result["halt_s"] = round(max(0.0, last - halter.halted_at), 4)
    pools = Counter(n.pool for n in rt.fleet)
    members = len(GPU.ids)
    stage_s = GPU.stage_minutes * members * time_scale
    # The simulator's activation time: its Activate task, or the tray's power cycle (GB200),
    # each as long as activating the members one by one (the seed durations).
    activate_s = GPU.activate_minutes * members * time_scale
    result["bound_s"] = round(
        stage_s + max(math.ceil(count / budget) for count in pools.values()) * activate_s, 3
    )
    return result


PUSH_IMAGE_BYTES = 4 * 1024 * 1024  # a GPU VBIOS package is megabytes (seed 000)
PUSH_ROUNDS = 7


async def run_bench(
    nodes: int, budget: int, workers: int, time_scale: float, dialect: str = "lockstep"
) -> dict[str, Any]:
    """The three runs, on BMCs speaking ``dialect``; the figures and their raw inputs."""
    wave = await _wave(
        nodes, budget, workers, time_scale, halt=False, host="127.91.0.1", dialect=dialect
    )
    halted = await _wave(
        nodes, budget, workers, time_scale, halt=True, host="127.92.0.1", dialect=dialect
    )
    push = await run_push(
        nodes,
        gpu_package(PUSH_IMAGE_BYTES),
        VERSION,
        GPU.ids,
        rounds=PUSH_ROUNDS,
        account=(OPERATOR_USERNAME, DEFAULT_PASSWORD),
        host="127.93.0.1",
        dialect=dialect,
    )
    return {
        "dialect": dialect,
        "nodes": nodes,
        "max_unavailable": budget,
        "workers": workers,
        "time_scale": time_scale,
        "makespan_s": wave["makespan_s"],
        "bound_s": wave["bound_s"],
        "makespan_ratio": round(wave["makespan_s"] / wave["bound_s"], 3),
        "states": wave["states"],
        "halt_s": halted.get("halt_s"),
        "halted_states": halted["states"],
        **push,
    }
