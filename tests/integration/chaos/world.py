"""The world the chaos programs run in: the five real services in-process on real NATS +
PostgreSQL over one simulated fleet (as in ``test_rollout_e2e``), started once, with the knobs
a program turns (kill and restart a service, expire leases, BMC and scheduler faults, health
regressions, operator abort, replayed events) and what the invariants read.

Each program is a fresh, short rollout of the same attested bundle over the whole (small) fleet:
``new_program`` gives the fleet back its factory firmware, clears faults and drains, and submits
a new intent; ``quiesce`` ends it (abort unless it ended by itself) and waits until every node
reached an end. Ledgers are compared per program (from where each stood when it began).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import nats
from nats.aio.client import Client as NatsClient

from lockstep_attest.testing.bundles import make_kit
from lockstep_cli.polling import until
from lockstep_common import subjects
from lockstep_common.compatibility.files import packaged_rules
from lockstep_common.envelope import EventData, make_envelope
from lockstep_common.events import REGISTRY
from lockstep_common.events.v1 import BundleSubmitted, IntentSubmitted, ScopeSelector
from lockstep_common.natsconn import NatsAccess
from lockstep_common.provenance import source_for
from lockstep_common.service import ServiceApp
from lockstep_common.subjects import Namespace
from lockstep_common.vocabulary import ChangeClass, Component
from lockstep_inventory import admin
from lockstep_inventory.adapters import registry
from lockstep_inventory.domain.fleet_file import NodeEntry
from lockstep_inventory.settings import Settings as InventorySettings
from lockstep_inventory.sweeping import run_sweep
from lockstep_sim.faults import Fault, FaultPlan
from lockstep_sim.fleet import FirmwareComponent
from lockstep_sim.options import DEFAULT_PASSWORD, OPERATOR_USERNAME, SimOptions
from lockstep_sim.runtime import FleetRuntime
from lockstep_sim.scheduler.errors import TooManyRequests
from lockstep_updater.ports import OWNER
from tests.integration.chaos.invariants import (
    NOT_A_TOUCH,
    PUSHES,
    Observation,
    Program,
    nothing_cordoned_without_reason,
)
from tests.integration.chaos.services import (
    CADENCE_S,
    MAX_UNAVAILABLE,
    SERVICES,
    service_factories,
)
from tests.integration.sim.pldm_fixtures import GB200_GPU, NEW_GPU_VERSION, package_for
from tests.speed import scaled

NODES = 10  # a canary of 5 against 5 controls, then a wave of 5: the healthgate's minimum
TERMINAL_ROLLOUT = frozenset({"aborted", "completed"})


@dataclass
class World:
    """The running stack (see the module docstring); every method runs on its one loop."""

    rt: FleetRuntime
    factories: dict[str, Callable[[], ServiceApp]]
    apps: dict[str, ServiceApp | None]
    nodes: list[NodeEntry]
    nc: NatsClient
    db: asyncpg.Pool
    ns: Namespace
    bundle_uri: str
    stack_hash: str
    attested_sha384: frozenset[str]
    factory_firmware: dict[str, dict[str, FirmwareComponent]]
    program: Program | None = None
    programs: int = 0
    stats: dict[str, int] = field(default_factory=dict)
    _sampler: asyncio.Task[None] | None = None
    _throttled: set[str | None] = field(default_factory=set)
    timings: dict[str, list[float]] = field(default_factory=dict)
    refusals: dict[str, int] = field(default_factory=dict)
    coverage: Counter[str] = field(default_factory=Counter)

    # -- the stack ---------------------------------------------------------------------------

    @classmethod
    async def start(cls, nats_url: str, database_url: str, namespace: str, tmp: Path) -> World:
        kit = make_kit(
            tmp / "release",
            gpu_image=(NEW_GPU_VERSION, package_for(GB200_GPU, NEW_GPU_VERSION)),
            only=(str(Component.GPU_VBIOS),),
        )
        rt = FleetRuntime(
            SimOptions(NODES, "gb200", seed=13, time_scale=0.002, host_base="127.93.0.1", port=0),
            scheduler_port=0,
            nats=NatsAccess.from_url(nats_url),
            namespace=namespace,
            cadence_s=CADENCE_S,
            create_streams=True,
        )
        await rt.start()

        factories = service_factories(
            nats_url, database_url, namespace, tmp, trust=kit.trust, scheduler_url=rt.scheduler_url
        )
        apps: dict[str, ServiceApp | None] = dict.fromkeys(SERVICES)
        nc = await nats.connect(nats_url)
        db = await asyncpg.create_pool(database_url, min_size=1, max_size=4)
        world = cls(
            rt,
            factories,
            apps,
            [],
            nc,
            db,
            Namespace(namespace),
            kit.bundle.as_uri(),
            "",
            frozenset(),
            {n.id: {m: dataclasses.replace(c) for m, c in n.components.items()} for n in rt.fleet},
        )
        try:
            await world._populate()
        except BaseException:
            await world.stop()
            raise
        return world

    async def _populate(self) -> None:
        """Every service started, the fleet imported and swept, the bundle attested."""
        rt = self.rt
        for name in SERVICES:
            await self.restart(name)
        self.nodes = [
            NodeEntry.model_validate(
                {
                    **n.summary(rt.simulator.port),
                    "credentials": "env:LOCKSTEP_TESTBMC",
                    # One supplier, so one stratum: 5 canary and 5 control nodes in it.
                    "supplier": "supplier-a",
                }
            )
            for n in rt.fleet
        ]
        inventory = self.apps["inventory"]
        assert inventory is not None
        async with inventory.require().pool.acquire() as conn:
            await registry.import_nodes(conn, self.nodes)
        await self.sweep()
        await self._attest()
        for bmc in (rt.simulator.bmc(n.id) for n in rt.fleet):
            # The wall-clock instant of each BMC ledger entry, comparable with PostgreSQL's
            # timestamps of the services' events (the ledger's own "time" has whole seconds).
            view = bmc.annotate
            bmc.annotate = lambda view=view: {**(view() if view else {}), "at": time.time()}

    async def stop(self) -> None:
        if self._sampler is not None:
            self._sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sampler
        self.rt.simulator.set_faults(None)
        for name in reversed(SERVICES):
            await self.kill(name)
        await self.nc.close()
        try:
            await asyncio.wait_for(self.db.close(), 5)
        except TimeoutError:  # a check abandoned by a timed-out caller still holds one
            self.db.terminate()
        await self.rt.stop()

    def table(self, service: str, name: str) -> str:
        return f"{self.ns.name}_{service}.{name}"

    async def sweep(self) -> None:
        inventory = self.apps["inventory"]
        assert inventory is not None
        assert isinstance(inventory.settings, InventorySettings)
        await run_sweep(
            inventory.require().pool,
            self.nodes,
            inventory.settings,
            by="chaos",
            source=admin.SOURCE,
            rules=packaged_rules(),
        )

    async def publish(self, subject: str, data: EventData) -> None:
        env = make_envelope(data, source=source_for(data))
        await self.nc.jetstream().publish(
            self.ns.wire(subject), env.to_json(), headers={"Nats-Msg-Id": str(env.event_id)}
        )

    async def _attest(self) -> None:
        """The release kit through the attest service, once: every program rolls it out."""
        await self.publish(
            subjects.bundle_submitted(),
            BundleSubmitted(bundle_uri=self.bundle_uri, submitted_by="ci-job-13"),
        )

        async def attested() -> dict[str, Any] | None:
            rows = await self.db.fetch(
                f"SELECT payload FROM {self.table('attest', 'outbox')} "
                "WHERE subject = 'bundle.attested'"
            )
            return json.loads(rows[0]["payload"])["data"] if rows else None

        bundle = await until(attested, what="bundle.attested", timeout_s=scaled(60))
        self.stack_hash = bundle["stack_hash"]
        self.attested_sha384 = frozenset(c["sha384"] for c in bundle["components"])

        async def known() -> bool:
            for name in ("planner", "updater"):
                if not await self.db.fetchval(
                    f"SELECT count(*) FROM {self.table(name, 'bundles')}"
                ):
                    return False
            return True

        await until(known, what="the bundle recorded by planner and updater", timeout_s=scaled(60))

    # -- knobs -------------------------------------------------------------------------------

    async def kill(self, name: str) -> bool:
        """Stop a service at once (in-flight work cancelled, unacked messages redelivered)."""
        app, self.apps[name] = self.apps[name], None
        if app is None:
            return False
        await app.stop()
        return True

    async def restart(self, name: str) -> bool:
        """A new process of the service (a stopped ``ServiceApp`` is not started again)."""
        if self.apps[name] is not None:
            return False
        app = self.factories[name]()
        await app.start()
        self.apps[name] = app
        return True

    async def expire_leases(self) -> int:
        """Every held lease lapses now, as if its holder had been paused past it (reliability
        B3): another worker may claim the item while the first one still runs."""
        count = 0
        for service, table in (
            ("updater", "node_work"),
            ("planner", "intents"),
            ("healthgate", "waves"),
        ):
            status = await self.db.execute(
                f"UPDATE {self.table(service, table)} SET lease_until = now() - interval '1 ms'"
                " WHERE lease_until > now()"
            )
            count += int(status.split()[-1])
        return count

    def add_fault(self, fault: Fault) -> None:
        self.rt.simulator.faults.add(fault)

    def throttle_drains(self, count: int, node_id: str | None) -> None:
        self.rt.scheduler.throttle_drains(count, node_id)
        self._throttled.add(node_id)

    def busy(self, pool: str, nodes: int, duration_s: float) -> bool:
        """A job on ``nodes`` free nodes of ``pool`` for ``duration_s`` simulated seconds (the
        scheduler's clock runs 30,000 times real time); False when they are not free."""
        return self.rt.scheduler.submit_job(pool, nodes=nodes, duration_s=duration_s) is not None

    def foreign_drain(self, node_id: str) -> bool:
        """Someone else drains the node (a PSU swap); refused while drains are throttled, and
        a node already drained keeps its drain."""
        scheduler = self.rt.scheduler
        if scheduler.node(node_id).drain is not None:
            return False
        try:
            scheduler.inject_foreign_drain(node_id, reason="PSU swap", by="dc-ops")
        except TooManyRequests:
            return False
        return True

    async def abort(self, by: str = "chaos-operator") -> bool:
        """``lockstep rollout abort``: one row in the planner's commands table."""
        program = self.program
        if program is None or program.rollout_id is None:
            await self._learn_rollout()
            if program is None or program.rollout_id is None:
                return False
        await self.db.execute(
            f"INSERT INTO {self.table('planner', 'commands')} "
            "(rollout_id, action, requested_by, reason) VALUES ($1, 'abort', $2, 'chaos')",
            program.rollout_id,
            by,
        )
        return True

    async def replay(self, picks: list[int], *, fresh: bool, earlier: bool = False) -> int:
        """Publish again, in the order ``picks`` names them, events the services already
        committed for this program's rollout (or, with ``earlier``, for the rollouts of earlier
        programs: stale events from the past): the same envelope (a redelivery the inboxes must
        drop) or, with ``fresh``, the same data under a new event id (a resent event the
        handlers must find already done). Old events arriving after newer ones: a reorder."""
        program = self.program
        if program is None or program.rollout_id is None:
            return 0
        rows: list[asyncpg.Record] = []
        for service in ("planner", "updater", "healthgate"):
            rows += await self.db.fetch(
                f"SELECT subject, payload FROM {self.table(service, 'outbox')} "
                "WHERE published_at IS NOT NULL AND subject ~ '[.]r-[0-9a-f]{16}' "
                "AND (strpos(subject, $1) > 0) <> $2 ORDER BY id",
                program.rollout_id,
                earlier,
            )
        if not rows:
            return 0
        js = self.nc.jetstream()
        for pick in picks:
            row = rows[pick % len(rows)]
            body = bytes(row["payload"])
            if fresh:
                env = REGISTRY.decode(body, max_bytes=1 << 20)
                body = make_envelope(
                    env.data, source=source_for(env.data), correlation_id=env.correlation_id
                ).to_json()
            await js.publish(
                self.ns.wire(row["subject"]), body, headers={"Nats-Msg-Id": str(uuid.uuid4())}
            )
        return len(picks)

    # -- programs ----------------------------------------------------------------------------

    def _reset_fleet(self) -> None:
        """Factory firmware, no faults, no drains, no throttles: each program starts equal."""
        sim = self.rt.simulator
        sim.set_faults(None)
        for node in self.rt.fleet:
            bmc = sim.bmc(node.id)
            for timer in bmc.timers:
                timer.cancel()
            bmc.timers.clear()
            bmc.pending_reset.clear()
            bmc.offline_until = 0.0
            node.components = {
                m: dataclasses.replace(c) for m, c in self.factory_firmware[node.id].items()
            }
            node.degraded_after_activation = False
        sched = self.rt.scheduler
        for node_id in self._throttled:
            sched.throttle_drains(0, node_id)
        self._throttled.clear()
        sched.slow_drains(0.0, 0)
        sched.tick()
        for scheduled in sched.nodes.values():
            if scheduled.drain is not None:  # the operator repairs quarantined nodes
                sched.resume(scheduled.node_id, "chaos-reset", force=True)

    async def new_program(self) -> Program:
        t0 = time.monotonic()
        self.programs += 1
        for name in SERVICES:
            await self.restart(name)
        self._reset_fleet()
        intent_id = uuid.uuid4()
        self.program = Program(
            number=self.programs,
            intent_id=intent_id,
            ledger_start={n.id: len(self.rt.simulator.bmc(n.id).ledger) for n in self.rt.fleet},
            started_at=time.time(),
        )
        await self.publish(
            subjects.intent_submitted(),
            IntentSubmitted(
                intent_id=intent_id,
                stack_hash=self.stack_hash,
                scope=ScopeSelector(),
                change_class=ChangeClass.ROUTINE,
                approval_ref="CAB-1313",
                submitted_by="chaos",
            ),
        )
        if self._sampler is None:
            self._sampler = asyncio.create_task(self._sample_forever())
        self.timings.setdefault("new", []).append(time.monotonic() - t0)
        return self.program

    async def _learn_rollout(self) -> None:
        program = self.program
        if program is None or program.rollout_id is not None:
            return
        row = await self.db.fetchrow(
            f"SELECT rollout_id, state, reasons FROM {self.table('planner', 'intents')} "
            "WHERE intent_id = $1",
            program.intent_id,
        )
        if row is not None and row["state"] in ("planned", "refused"):
            program.refused = row["state"] == "refused"
            if program.refused:
                program.reasons = list(row["reasons"])
            if not program.refused:
                program.rollout_id = row["rollout_id"]

    async def observe(self) -> Observation:
        """Everything the invariants read, as of now (database first, then the simulator: a
        node quarantined meanwhile only makes the budget check stricter)."""
        program = self.program
        assert program is not None
        await self._learn_rollout()
        rid = program.rollout_id or "-"
        work = await self.db.fetch(
            f"SELECT node_id, wave, state, reason, kind FROM {self.table('updater', 'node_work')} "
            "WHERE rollout_id = $1",
            rid,
        )
        rollout_state = await self.db.fetchval(
            f"SELECT state FROM {self.table('planner', 'rollouts')} WHERE rollout_id = $1", rid
        )
        waves = await self.db.fetch(
            f"SELECT payload FROM {self.table('planner', 'outbox')} WHERE subject = $1",
            subjects.wave_planned(rid) if program.rollout_id else "-",
        )
        gates = await self.db.fetch(
            f"SELECT subject, payload, extract(epoch FROM created_at)::float8 AS at "
            f"FROM {self.table('healthgate', 'outbox')} WHERE subject LIKE 'gate.%.' || $1",
            rid,
        )
        budget = await self.db.fetchval(
            f"SELECT max(max_unavailable) FROM {self.table('updater', 'waves')} "
            "WHERE rollout_id = $1",
            rid,
        )
        quarantined = await self._quarantined()
        sched = self.rt.scheduler
        sched.tick()
        return Observation(
            work={
                r["node_id"]: (r["wave"], r["state"], r["reason"])
                for r in work
                if r["kind"] == "update"
            },
            rollbacks={
                r["node_id"]: (r["wave"], r["state"], r["reason"])
                for r in work
                if r["kind"] == "rollback"
            },
            rollout_state=rollout_state,
            waves={
                d["wave"]: tuple(d["node_ids"])
                for d in (json.loads(w["payload"])["data"] for w in waves)
            },
            gates=[
                (r["subject"].split(".")[1], json.loads(r["payload"])["data"]["wave"], r["at"])
                for r in gates
            ],
            ledgers={
                n.id: list(self.rt.simulator.bmc(n.id).ledger[program.ledger_start[n.id] :])
                for n in self.rt.fleet
            },
            cordoned={
                n.node_id: n.pool
                for n in sched.nodes.values()
                if n.drain is not None and n.drain.by == OWNER
            },
            quarantined=quarantined,
            max_unavailable=budget if budget is not None else MAX_UNAVAILABLE,
            attested_sha384=self.attested_sha384,
        )

    async def _quarantined(self) -> frozenset[str]:
        """Nodes whose latest work item (any rollout) is quarantined: they stay cordoned by
        design and count against the failure budget, not the pool's (domain/steps.py)."""
        rows = await self.db.fetch(
            f"SELECT DISTINCT ON (node_id) node_id, state FROM {self.table('updater', 'node_work')}"
            " ORDER BY node_id, id DESC"
        )
        return frozenset(r["node_id"] for r in rows if r["state"] == "quarantined")

    async def _sample_forever(self) -> None:
        """Every 50 ms: nodes out of service per pool against the budget, and no activation
        running on a node that is not drained (reliability F2 samples every 100 ms)."""
        while True:
            await asyncio.sleep(0.05)
            program = self.program
            if program is None:
                continue
            try:
                quarantined = await self._quarantined()
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
                continue
            sched = self.rt.scheduler
            sched.tick()
            out: dict[str, list[str]] = {}
            for node in sched.nodes.values():
                ours = node.drain is not None and node.drain.by == OWNER
                if ours and node.node_id not in quarantined:
                    out.setdefault(node.pool, []).append(node.node_id)
            for pool, ids in out.items():
                if len(ids) > MAX_UNAVAILABLE:
                    program.sampled.append(
                        f"pool {pool}: {len(ids)} nodes out of service ({', '.join(ids)}) "
                        f"> max_unavailable {MAX_UNAVAILABLE}"
                    )
            for n in self.rt.fleet:
                bmc = self.rt.simulator.bmc(n.id)
                running = [
                    t.id
                    for t in bmc.tasks.values()
                    if t.name == "Firmware activation" and not t.done
                ]
                node = sched.node(n.id)
                drained = node.drain is not None and node.drain.by == OWNER
                if running and not (drained and node.state.value == "drained"):
                    program.sampled.append(
                        f"{n.id}: activation task {running} running while the scheduler has it "
                        f"{node.state.value} (drained by {node.drain.by if node.drain else None})"
                    )

    async def quiesce(
        self, timeout_s: float = 30.0, *, settle_s: float = 0.0, abort: bool = True
    ) -> Observation:
        """End the program: faults cleared, every service back, ``settle_s`` for the rollout to
        end by itself, then an abort unless it did (or ``abort`` is false: it must end by
        itself); then wait until the rollout and every node of it reached an end. Both times
        are the reference machine's (``tests.speed``): a slower one gets longer."""
        timeout_s, settle_s = scaled(timeout_s), scaled(settle_s)
        program = self.program
        assert program is not None
        t0 = time.monotonic()
        try:
            return await self._quiesce(program, timeout_s, settle_s, abort=abort)
        finally:
            self.timings.setdefault("quiesce", []).append(time.monotonic() - t0)

    async def _quiesce(
        self, program: Program, timeout_s: float, settle_s: float, *, abort: bool
    ) -> Observation:
        self.rt.simulator.set_faults(None)
        for node_id in self._throttled:
            self.rt.scheduler.throttle_drains(0, node_id)
        self.rt.scheduler.slow_drains(0.0, 0)
        t1 = time.monotonic()
        for name in SERVICES:
            await self.restart(name)
        self.timings.setdefault("restarts", []).append(time.monotonic() - t1)

        async def decided() -> bool:
            await self._learn_rollout()
            return program.refused or program.rollout_id is not None

        await until(decided, what="the intent planned or refused", timeout_s=timeout_s)
        if program.refused:
            self.stats["refused"] = self.stats.get("refused", 0) + 1
            for reason in program.reasons:
                self.refusals[reason] = self.refusals.get(reason, 0) + 1
            return await self.observe()
        aborted = not abort
        settled = time.monotonic() + settle_s
        before = None

        async def ended() -> Observation | None:
            nonlocal aborted, before
            seen = await self.observe()
            before = before or f"rollout {seen.rollout_state} when its steps ended"
            waiting = seen.rollout_state in (None, "planned", "running") and (
                time.monotonic() < settled
            )
            if seen.rollout_state not in TERMINAL_ROLLOUT and not aborted and not waiting:
                aborted = await self.abort(by="chaos-teardown")
            done = seen.rollout_state in TERMINAL_ROLLOUT and all(
                state in ("done", "cancelled", "failed", "quarantined")
                for _, state, _ in (*seen.work.values(), *seen.rollbacks.values())
            )
            if done:
                # At rest only once no drain of Lockstep's lacks its reason: a cordon that
                # landed after its item ended is the updater's to give back (its reaper's
                # sweep, within reap_interval_s); one it never gives back times out here.
                seen.at_rest = True
                done = not nothing_cordoned_without_reason(seen)
                seen.at_rest = False
            return seen if done else None

        try:
            seen = await until(
                ended, what="the rollout at rest", timeout_s=timeout_s + settle_s, poll_s=0.1
            )
        except TimeoutError:
            seen = await self.observe()
            program.sampled.append(f"not at rest after {timeout_s:g}s: {seen.summary()}")
            return seen
        seen.at_rest = True
        outcome = str(seen.rollout_state)
        self.stats[outcome] = self.stats.get(outcome, 0) + 1
        # What the programs exercised, for the run's summary (and its coverage assertions).
        self.coverage.update(
            [
                str(before),
                *(f"gate {verdict} on wave {wave}" for verdict, wave, _ in seen.gates),
                *(f"node {step}" for _, step, _ in seen.work.values()),
                *(["image pushed"] if any(_pushes_of(seen)) else []),
            ]
        )
        await self._restore(program, pinned=outcome == "completed")
        return seen

    async def _restore(self, program: Program, *, pinned: bool) -> None:
        """After the checks: factory firmware again and, where the rollout changed what the
        inventory knows (a pin, flashed nodes), the pin forgotten and the fleet read afresh,
        so the next program's plan starts from the same fleet."""
        if pinned:
            rid = program.rollout_id

            async def applied() -> bool:
                return bool(
                    await self.db.fetchval(
                        f"SELECT count(*) FROM {self.table('inventory', 'pins')} "
                        "WHERE rollout_id = $1",
                        rid,
                    )
                )

            t0 = time.monotonic()
            await until(
                applied, what="the rollout's pin applied", timeout_s=scaled(20), poll_s=0.05
            )
            self.timings.setdefault("pin", []).append(time.monotonic() - t0)
            # The drift judged against the pin goes with it: a sweep that reads the same
            # versions as before does not judge a node again (the inventory emits on change).
            for table in ("pins", "recorded_changes", "drift"):
                await self.db.execute(f"DELETE FROM {self.table('inventory', table)}")
        touched = any(
            e["action"] not in NOT_A_TOUCH
            for n in self.rt.fleet
            for e in self.rt.simulator.bmc(n.id).ledger[program.ledger_start[n.id] :]
        )
        self._reset_fleet()
        if pinned or touched:
            t0 = time.monotonic()
            await self.sweep()
            self.timings.setdefault("sweep", []).append(time.monotonic() - t0)


def _pushes_of(seen: Observation) -> list[dict[str, Any]]:
    return [e for entries in seen.ledgers.values() for e in entries if e["action"] in PUSHES]


async def started_world(nats_url: str, database_url: str, namespace: str, tmp: Path) -> World:
    """The world with the test BMC credentials in the environment the updater reads."""
    import os

    os.environ["LOCKSTEP_TESTBMC_USERNAME"] = OPERATOR_USERNAME
    os.environ["LOCKSTEP_TESTBMC_PASSWORD"] = DEFAULT_PASSWORD
    return await World.start(nats_url, database_url, namespace, tmp)


__all__ = ["NODES", "SERVICES", "Fault", "FaultPlan", "World", "started_world"]
