"""``lockstep bench rollout``: a whole-fleet rollout on the simulator, measured (issue 13, item 6).

What runs: the five services as their own processes, started the way ``lockstep up`` starts
them (``supervisor.running_system``: embedded NATS with one identity per party, PostgreSQL with
one role per service), over one simulated fleet of ``nodes`` gb200 nodes whose BMCs and
scheduler run at a scaled clock (``time_scale`` real seconds per simulated minute) and whose
node agents publish inventory and health to NATS. The fleet is imported into the inventory and
swept; a signed release kit moving the GPU VBIOS is submitted (``bundle.submitted``, as the
``cli`` identity), attested, and a routine rollout moving the whole fleet is started as
``lockstep rollout start`` starts it (``rollout.start`` asked of the planner as the ``cli``
identity, ``bench.start``). The clock runs from that request until the planner records the
rollout ``completed``: planning, the canary, its gate, every wave and its gate.

The change class is the packaged ``routine`` one (canary, then waves to 5%, 25% and 100%) with
its soaks shortened to what the node agents' cadence allows (the gate needs 3 reports per node
inside a soak) and approvals waived; the gate policy is the packaged one with the smallest
minimums (5 canary and 5 control nodes per stratum). ``max_unavailable`` is 10% of a pool, as
``bench plan`` sizes it, so every wave takes about ``10 x fraction`` activation rounds whatever
the fleet size. Fleets under 60 nodes are imported as one supplier (one stratum), as the e2e
test does: three strata of a tiny fleet cannot each hold 5 canary and 5 control nodes.

Figures (JSON keys):

- ``seconds``: the makespan, ``rollout.start`` asked -> rollout completed (wall clock).
- ``lower_bound_s``: what no control plane could beat on the plan the planner made, from the
  planner's own waves (``planner.waves``: members, ``max_unavailable``, ``soak_s``), the
  simulator's durations and the budgets. Per wave ``w`` with ``max_unavailable`` ``c_w`` and
  soak ``s_w``::

      bound_w = stage + max over pools p of ceil(|w in p| / c_w) x activate + s_w
      lower_bound_s = sum over waves of bound_w

  where ``stage`` and ``activate`` are the simulator's GPU VBIOS durations (profiles.py: minutes
  per member, one flash at a time per BMC, times the GPU members, times ``time_scale``). Every
  node stages its inactive bank while it still works (A/B, no budget spent), so a wave needs at
  least one staging; then a pool lets ``c_w`` nodes out of service at once, and each activation
  holds its slot at least ``activate``; the gates serialise waves, and a wave is judged only
  after its soak. The simulated pools have no maintenance windows (the planner's fleet has
  none either), and the scheduler runs no jobs, so draining adds nothing to the bound. Control
  plane latencies (claims, polls, the relay, the gate's evaluation) are what the ratio shows.
- ``ratio``: ``seconds / lower_bound_s`` (goal <= 1.15).
- ``cpu_s_per_node``: CPU seconds (user + system, ``/proc/<pid>/stat``) the five service
  processes spent between the rollout's start and the rollout's completion, divided by
  ``nodes``. Not counted: NATS, PostgreSQL, and this process (simulator, agents, bench).
  ``cpu_s`` gives each service's share, ``bench_cpu_s`` this process's.
- ``peak_mb``: each service process's peak resident set (``VmHWM`` in ``/proc/<pid>/status``),
  read just before the services stop, in MB; with ``updaters`` above 1 the second updater
  process is ``updater-2`` and so on (``cpu_s`` adds a service's processes together).
- ``machine_busy``: the CPU time every process of the machine spent over the run (``/proc/stat``)
  as a fraction of what its cores could give in that time. Near 1, the machine, not the
  control plane's latencies, set the makespan: the simulated clock ran faster than these
  cores can serve the fleet (a smaller ``--time-scale`` compresses more).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import Any

import asyncpg
import yaml

from lockstep_bench.start import StartRefused, start_rollout
from lockstep_bench.update import GPU, VERSION, gpu_package
from lockstep_cli.polling import until
from lockstep_cli.supervisor import SERVICES, ServiceProcess, running_system
from lockstep_common import db, subjects
from lockstep_common.compatibility.files import packaged_rules
from lockstep_common.envelope import EventData, make_envelope
from lockstep_common.events.v1 import BundleSubmitted, PlanAsk, ScopeSelector
from lockstep_common.identities import CLI
from lockstep_common.natsconn import connect
from lockstep_common.open_files import HEADROOM, raise_fd_limit
from lockstep_common.provenance import source_for
from lockstep_common.subjects import Namespace
from lockstep_common.vocabulary import ChangeClass, Component
from lockstep_devstack import Stack
from lockstep_devstack.process import free_port
from lockstep_inventory import admin
from lockstep_inventory.adapters import registry
from lockstep_inventory.domain.fleet_file import NodeEntry
from lockstep_inventory.settings import Settings as InventorySettings
from lockstep_inventory.sweeping import run_sweep
from lockstep_sim.options import DEFAULT_PASSWORD, OPERATOR_USERNAME, SimOptions
from lockstep_sim.runtime import FleetRuntime
from lockstep_updater.settings import Settings as UpdaterSettings

CREDENTIALS = "LOCKSTEP_BENCHROLL_BMC"
SAMPLES = 3  # the gate policy's samples_per_node below
ONE_STRATUM_UNDER = 60
MIN_NODES = 2 * 5 + 2  # one stratum: 5 canary + 5 control, and a wave after the canary
CANARY_PER_STRATUM = 5
TICKS = os.sysconf("SC_CLK_TCK")


class BenchFailed(RuntimeError):
    """The rollout did not complete: one line saying how far it got."""


@dataclass(frozen=True)
class RolloutOptions:
    """What to run."""

    nodes: int = 200
    time_scale: float = 0.2
    report_rate: float = 250.0
    """Agent reports per second over the whole fleet: sets the cadence, hence the soaks."""
    timeout_s: float = 3600.0
    seed: int = 13
    updaters: int = 1
    """Updater processes (a deployment scales the updater out: they claim node by node under
    fenced leases, as ``lockstep up --nats-cluster 3`` runs two)."""
    data_dir: Path | None = None
    """Where the servers' state and the services' logs go, kept afterwards (None: a
    temporary directory, removed)."""

    @property
    def cadence_s(self) -> float:
        """Real seconds between two reports of one node agent."""
        return max(1.0, self.nodes / self.report_rate)

    @property
    def soak_s(self) -> int:
        """Every soak: room for ``SAMPLES`` reports per node and one more cadence of slack."""
        return math.ceil((SAMPLES + 1) * self.cadence_s)

    @property
    def stage_s(self) -> float:
        """The simulator's GPU VBIOS staging of one node, real seconds (all members)."""
        return GPU.stage_minutes * len(GPU.ids) * self.time_scale

    @property
    def activate_s(self) -> float:
        """The simulator's GPU VBIOS activation of one node, real seconds (all members)."""
        return GPU.activate_minutes * len(GPU.ids) * self.time_scale

    @property
    def poll_s(self) -> float:
        """The updater's Redfish, drain and claim polls, scaled with the simulator's clock: an
        80th of an activation, at least 0.05 s (CPU on 2 cores). The service's defaults are
        finer still against a real device: 5 s polls against a 20-minute GPU activation."""
        return round(min(0.25, max(0.05, self.activate_s / 80)), 3)

    def budget(self, pools: int) -> int:
        """max_unavailable: 10% of an average pool (as ``bench plan``), at least 2."""
        return max(2, math.ceil(self.nodes / pools / 10))


def planner_policy(path: Path, soak_s: int) -> Path:
    """The packaged change classes; routine with every soak ``soak_s``, approvals waived and
    ``CANARY_PER_STRATUM`` canary nodes per stratum (the gate's minimum)."""
    doc = yaml.safe_load(
        resources.files("lockstep_planner").joinpath("data/change_classes.yaml").read_bytes()
    )
    routine = doc["classes"]["routine"]
    routine.update(
        canary_min_per_stratum=CANARY_PER_STRATUM,
        canary_soak_s=soak_s,
        layer_soak_s=0,
        wave_soak_s=soak_s,
    )
    routine["approvals"]["count"] = 0
    path.write_text(yaml.safe_dump(doc))
    return path


def gate_policy(path: Path, cadence_s: float) -> Path:
    """The packaged gate policy with the smallest minimums Mann-Whitney's 98% interval allows
    (5 against 5) and the heartbeat rule at the agents' cadence."""
    text = resources.files("lockstep_gate").joinpath("data/default_policy.toml").read_text()
    head, _, rest = text.partition("[minimum]")
    rest = rest.split("\n[hard_rules]", 1)[1]
    minimum = (
        f"[minimum]\ncanary_nodes = {CANARY_PER_STRATUM}\ncontrol_nodes = {CANARY_PER_STRATUM}\n"
        f"samples_per_node = {SAMPLES}\n"
    )
    # A shared 2-core machine can starve the agents for a few seconds: five missed reports,
    # not the packaged three, before a node counts as dead (the rule stays on).
    changed = {
        "heartbeat_interval_s": f"heartbeat_interval_s = {cadence_s}",
        "heartbeat_missed_intervals": "heartbeat_missed_intervals = 5",
    }
    lines = [
        changed.get(line.split(" ", 1)[0], line) for line in ("[hard_rules]" + rest).splitlines()
    ]
    path.write_text(head + minimum + "\n" + "\n".join(lines) + "\n")
    return path


def service_env(opts: RolloutOptions, base: Path, bundle_root: Path, trust: Path) -> dict[str, str]:
    """Every service's settings for the bench (``LOCKSTEP_<SERVICE>_*``)."""
    approvers = base / "approvers"
    approvers.mkdir(exist_ok=True)
    poll = str(opts.poll_s)
    env = {
        f"{CREDENTIALS}_USERNAME": OPERATOR_USERNAME,
        f"{CREDENTIALS}_PASSWORD": DEFAULT_PASSWORD,
    }
    # The relays, the planner's worker and the attest worker keep their default 1 s polls: a
    # committed event, intent or command wakes them at once (PostgreSQL NOTIFY) and the planner
    # waits for a soak's end, not a poll (``PlannerWorker.idle_s``). 50 ms polls, as here
    # before, spent CPU in every service (py-spy: most of the planner's and attest's) and
    # shortened no wait.
    for name in SERVICES:
        env[f"LOCKSTEP_{name.upper()}_CONSUMER_FETCH_TIMEOUT_S"] = "0.2"
    roots = json.dumps([str(bundle_root)])
    return env | {
        "LOCKSTEP_ATTEST_TRUST_STORE": str(trust),
        "LOCKSTEP_ATTEST_BUNDLE_ROOTS": roots,
        "LOCKSTEP_INVENTORY_SWEEP_INTERVAL_S": "0",
        "LOCKSTEP_PLANNER_POLICY_FILE": str(planner_policy(base / "classes.yaml", opts.soak_s)),
        "LOCKSTEP_PLANNER_APPROVERS_DIR": str(approvers),
        "LOCKSTEP_PLANNER_DEFAULT_MAX_UNAVAILABLE": str(opts.budget(3)),
        "LOCKSTEP_UPDATER_BUNDLE_ROOTS": roots,
        "LOCKSTEP_UPDATER_WORKERS": str(min(4096, math.ceil(opts.nodes / opts.updaters))),
        "LOCKSTEP_UPDATER_WORKER_POLL_S": poll,
        "LOCKSTEP_UPDATER_RETRY_S": poll,
        "LOCKSTEP_UPDATER_DRAIN_POLL_S": poll,
        "LOCKSTEP_UPDATER_REDFISH_POLL_S": poll,
        "LOCKSTEP_UPDATER_VERIFY_SETTLE_S": "30",
        "LOCKSTEP_HEALTHGATE_POLICY_FILE": str(gate_policy(base / "gate.toml", opts.cadence_s)),
        "LOCKSTEP_HEALTHGATE_EVAL_POLL_S": "0.1",
        "LOCKSTEP_HEALTHGATE_EVAL_GRACE_S": "0.5",
    }


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (proc(5): stat fields 14 and 15)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat.rsplit(")", 1)[1].split()  # the command name may hold spaces
    return (int(fields[11]) + int(fields[12])) / TICKS


def machine_cpu_seconds() -> float:
    """CPU seconds every process of the machine spent so far, all cores (proc(5), the ``cpu``
    line of ``/proc/stat``: user, nice, system, irq, softirq, steal; idle and iowait left out)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    return (user + nice + system + irq + softirq + steal) / TICKS


def peak_rss_mb(pid: int) -> float:
    """Peak resident set of process ``pid`` (``VmHWM``, proc(5)), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) * 1024 / 1e6, 1)
    raise BenchFailed(f"no VmHWM for pid {pid}")


def lower_bound(
    waves: Sequence[Mapping[str, Any]], pool_of: Mapping[str, str], opts: RolloutOptions
) -> tuple[float, list[float]]:
    """The bound of the module docstring, and each wave's part of it."""
    parts = []
    for wave in waves:
        per_pool = Counter(pool_of[n] for n in wave["node_ids"])
        rounds = max((math.ceil(k / wave["max_unavailable"]) for k in per_pool.values()), default=0)
        parts.append(opts.stage_s + rounds * opts.activate_s + wave["soak_s"])
    return round(sum(parts), 3), [round(p, 3) for p in parts]


def run_bench(opts: RolloutOptions, say: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """The whole rollout once; its figures and their raw inputs."""
    from lockstep_attest.testing.bundles import make_kit

    # Per node its BMC's listener and its agent's own NATS connection; the BMC sessions the
    # updaters keep (two sockets each at most, BMC_SESSIONS_MAX per process) accepted here.
    sessions = UpdaterSettings.model_fields["bmc_sessions_max"].default
    kept = min(2 * opts.nodes, 2 * sessions * opts.updaters)
    try:
        raise_fd_limit(2 * opts.nodes + kept + HEADROOM)
    except RuntimeError as exc:
        raise BenchFailed(f"--nodes {opts.nodes}: {exc}") from None
    base = opts.data_dir or Path(tempfile.mkdtemp(prefix="lockstep-bench-rollout-"))
    base.mkdir(parents=True, exist_ok=True)
    base.chmod(0o755)
    try:
        kit = make_kit(
            base / "release", gpu_image=(VERSION, gpu_package()), only=(str(Component.GPU_VBIOS),)
        )
        env = service_env(opts, base, kit.bundle.parent, kit.trust)
        scheduler_port = free_port()
        env["LOCKSTEP_UPDATER_SCHEDULER_URL"] = f"http://127.0.0.1:{scheduler_port}"
        say("starting NATS, PostgreSQL and the five services")
        with running_system(
            base, SERVICES, durable=False, extra_env=env, replicas={"updater": opts.updaters}
        ) as (stack, services):
            try:
                return asyncio.run(_run(opts, stack, services, kit.bundle, scheduler_port, say))
            except (BenchFailed, StartRefused, TimeoutError) as exc:
                raise BenchFailed(f"{exc} (service logs: {_tails(services)})") from exc
    finally:
        if opts.data_dir is None:
            shutil.rmtree(base, ignore_errors=True)


def _tails(services: Sequence[ServiceProcess]) -> str:
    from lockstep_cli.supervisor import service_reason

    return "; ".join(f"{s.name}: {service_reason(s.log_path)[:160]}" for s in services)


@dataclass
class _Bench:
    opts: RolloutOptions
    stack: Stack
    rt: FleetRuntime
    admin: asyncpg.Connection
    ns: Namespace

    async def publish(self, subject: str, data: EventData) -> None:
        nc = await connect(self.stack.nats_client(CLI), name="lockstep-bench")
        try:
            env = make_envelope(data, source=source_for(data))  # as its producer
            await nc.jetstream().publish(
                self.ns.wire(subject), env.to_json(), headers={"Nats-Msg-Id": str(env.event_id)}
            )
        finally:
            await nc.close()

    async def start(self, ask: PlanAsk) -> None:
        """``rollout start`` as the ``cli`` identity: the planner records and plans the intent."""
        nc = await connect(self.stack.nats_client(CLI), name="lockstep-bench")
        try:
            await start_rollout(
                nc, self.ns, CLI, ask, approval_ref="BENCH-13", timeout_s=self.opts.timeout_s
            )
        finally:
            await nc.close()

    async def value(self, sql: str, *args: Any) -> Any:
        return await self.admin.fetchval(sql, *args)

    async def import_and_sweep(self) -> None:
        """The fleet into the inventory's registry, then one sweep: what the planner plans
        over (current versions, pools, fabric domains)."""
        url = self.stack.database_env("inventory")["LOCKSTEP_DATABASE_URL"]
        one = self.opts.nodes < ONE_STRATUM_UNDER
        nodes = [
            NodeEntry.model_validate(
                {
                    **n.summary(self.rt.simulator.port),
                    "credentials": f"env:{CREDENTIALS}",
                    **({"supplier": "supplier-a"} if one else {}),
                }
            )
            for n in self.rt.fleet
        ]
        pool = await db.create_pool(
            url, "inventory", min_size=1, max_size=4, application_name="lockstep-bench"
        )
        try:
            async with pool.acquire() as conn:
                await registry.import_nodes(conn, nodes)
            os.environ.update(
                {
                    f"{CREDENTIALS}_USERNAME": OPERATOR_USERNAME,
                    f"{CREDENTIALS}_PASSWORD": DEFAULT_PASSWORD,
                }
            )
            settings = InventorySettings(
                nats_url=",".join(self.stack.nats_client(CLI).servers),
                database_url=url,
                log_json=False,
            )
            await run_sweep(
                pool, nodes, settings, by="bench", source=admin.SOURCE, rules=packaged_rules()
            )
        finally:
            await pool.close()

    async def attest(self, bundle: Path) -> str:
        await self.publish(
            subjects.bundle_submitted(),
            BundleSubmitted(bundle_uri=bundle.as_uri(), submitted_by="bench"),
        )

        async def known() -> str | None:
            planner = await self.value("SELECT min(stack_hash) FROM planner.bundles")
            updater = await self.value("SELECT count(*) FROM updater.bundles")
            return str(planner) if planner and updater else None

        return await until(known, "the bundle attested and known to planner and updater", 120)

    async def finished(self) -> tuple[str, str] | None:
        """(rollout id, state) once the rollout ended, or the intent was refused."""
        refused = await self.admin.fetchrow(
            "SELECT intent_id, reasons FROM planner.intents WHERE state = 'refused'"
        )
        if refused is not None:
            raise BenchFailed(f"the planner refused the intent: {refused['reasons']}")
        row = await self.admin.fetchrow(
            "SELECT rollout_id, state FROM planner.rollouts"
            " WHERE state IN ('completed', 'halted', 'aborted', 'paused')"
        )
        return None if row is None else (row["rollout_id"], row["state"])


async def _run(
    opts: RolloutOptions,
    stack: Stack,
    services: Sequence[ServiceProcess],
    bundle: Path,
    scheduler_port: int,
    say: Callable[[str], None],
) -> dict[str, Any]:
    ns = Namespace(os.environ.get("LOCKSTEP_NAMESPACE", "lockstep"))
    options = SimOptions(
        opts.nodes, "gb200", seed=opts.seed, time_scale=opts.time_scale,
        host_base="127.93.0.1", port=0,
    )  # fmt: skip
    rt = FleetRuntime(
        options, scheduler_port=scheduler_port, namespace=ns.name, cadence_s=opts.cadence_s
    )
    started = time.monotonic()
    # One identity per simulated node agent, allowed its own node's subjects only.
    rt.agent_access = stack.enroll_agents({n.id: n.site for n in rt.fleet})
    say(f"enrolled {opts.nodes} node agents in {time.monotonic() - started:.1f}s")
    started = time.monotonic()
    async with rt:
        say(f"{opts.nodes} node agents connected in {time.monotonic() - started:.1f}s")
        conn = await db.connect_with_retry(str(stack.database_url), attempts=3)
        try:
            bench = _Bench(opts, stack, rt, conn, ns)
            say(f"importing and sweeping {opts.nodes} simulated nodes")
            await bench.import_and_sweep()
            stack_hash = await bench.attest(bundle)
            return await _measure(bench, services, stack_hash, say)
        finally:
            await conn.close()


async def _measure(
    bench: _Bench, services: Sequence[ServiceProcess], stack_hash: str, say: Callable[[str], None]
) -> dict[str, Any]:
    opts = bench.opts
    cpu0 = {s.label: cpu_seconds(s.proc.pid) for s in services}
    own0 = time.process_time()
    machine0 = machine_cpu_seconds()
    say(f"rolling out over {opts.nodes} nodes")
    started = time.perf_counter()
    await bench.start(
        PlanAsk(stack_hash=stack_hash, scope=ScopeSelector(), change_class=ChangeClass.ROUTINE)
    )
    rollout, state = await until(bench.finished, "the rollout to end", opts.timeout_s, poll_s=0.05)
    seconds = time.perf_counter() - started
    cpu = dict.fromkeys((s.name for s in services), 0.0)  # a service's processes together
    for s in services:
        cpu[s.name] += cpu_seconds(s.proc.pid) - cpu0[s.label]
    own = time.process_time() - own0
    busy = (machine_cpu_seconds() - machine0) / ((os.cpu_count() or 1) * seconds)
    peak = {s.label: peak_rss_mb(s.proc.pid) for s in services}
    if state != "completed":
        reason = await bench.value(
            "SELECT detail FROM planner.audit WHERE rollout_id = $1 ORDER BY id DESC LIMIT 1",
            rollout,
        )
        raise BenchFailed(f"rollout {rollout} ended {state}: {reason}")
    waves = [
        dict(r)
        for r in await bench.admin.fetch(
            "SELECT number, node_ids, max_unavailable, soak_s, released_at, soak_until"
            " FROM planner.waves"
            " WHERE rollout_id = $1 ORDER BY number",
            rollout,
        )
    ]
    pool_of = {n.id: n.pool for n in bench.rt.fleet}
    bound, parts = lower_bound(waves, pool_of, opts)
    finished_at = await bench.value(
        "SELECT updated_at FROM planner.rollouts WHERE rollout_id = $1", rollout
    )
    steps = await _steps(bench.admin, rollout)
    ends = Counter(
        r["state"]
        for r in await bench.admin.fetch(
            "SELECT state FROM updater.node_work WHERE rollout_id = $1", rollout
        )
    )
    return {
        "nodes": opts.nodes,
        "time_scale": opts.time_scale,
        "seconds": round(seconds, 2),
        "lower_bound_s": bound,
        "ratio": round(seconds / bound, 3),
        "cpu_s_per_node": round(sum(cpu.values()) / opts.nodes, 4),
        "peak_mb": peak,
        "cpu_s": {name: round(s, 2) for name, s in cpu.items()},
        "updaters": opts.updaters,
        "bench_cpu_s": round(own, 2),
        "machine_busy": round(busy, 2),
        "waves": [
            {
                "number": w["number"],
                "nodes": len(w["node_ids"]),
                "max_unavailable": w["max_unavailable"],
                "soak_s": w["soak_s"],
                "bound_s": part,
                # Released -> every node ended (the updater's part), then -> the next release
                # (the soak, the gate's verdict and the planner's release).
                "work_s": _span(w["released_at"], w["soak_until"], -w["soak_s"]),
                "to_next_s": _span(
                    w["soak_until"], nxt["released_at"] if nxt else finished_at, 0.0
                ),
            }
            for w, part, nxt in zip(waves, parts, [*waves[1:], None], strict=True)
        ],
        "step_s": steps,
        "stage_s": round(opts.stage_s, 3),
        "activate_s": round(opts.activate_s, 3),
        "cadence_s": opts.cadence_s,
        "node_ends": dict(ends),
        "rollout_id": rollout,
    }


def _span(start: datetime | None, end: datetime | None, plus: float) -> float | None:
    if start is None or end is None:
        return None
    return round((end - start).total_seconds() + plus, 2)


async def _steps(conn: asyncpg.Connection, rollout: str) -> dict[str, dict[str, float]]:
    """Per updater step: the median time a worker spent in it (``run``) and the median time
    the node waited for that step to be claimed after its previous step ended (``wait``)."""
    rows = await conn.fetch(
        "SELECT step, percentile_cont(0.5) WITHIN GROUP (ORDER BY run) AS run,"
        " percentile_cont(0.5) WITHIN GROUP (ORDER BY wait) AS wait FROM ("
        " SELECT step, extract(epoch FROM ended_at - started_at) AS run,"
        " extract(epoch FROM started_at - lag(ended_at) OVER (PARTITION BY work_id ORDER BY id))"
        " AS wait FROM updater.node_steps WHERE rollout_id = $1) s GROUP BY step",
        rollout,
    )
    return {
        r["step"]: {"run": round(r["run"] or 0.0, 3), "wait": round(r["wait"] or 0.0, 3)}
        for r in rows
    }
