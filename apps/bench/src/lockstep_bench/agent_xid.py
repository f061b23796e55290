"""``lockstep bench agent --xid``: an XID line in the kernel log -> ``gate.tripped``, on a
running stack (NATS JetStream and PostgreSQL; ``LOCKSTEP_NATS_URL`` / ``LOCKSTEP_DATABASE_URL``,
else embedded servers), through the real agent and the real healthgate service.

``trials`` node agents run in this process (``lockstep_agent.runner.Runner``: their own probes
on a fake 8-GPU node root each, NVML answered by the CPU bench's stand-in, their disk spool,
their NATS connection) at the production cadence of 10 s, each following its node's kernel log:
a named pipe in the place of ``/dev/kmsg`` carrying records in its format (the agent follows
one as it follows ``/dev/kmsg``; a process cannot write a kernel-facility record into the real
one). Each agent's node is a canary of a wave of its own (5 canary and 10 control nodes), which
the healthgate service (in this process, fresh namespace and schema) soaks. Then, one agent at
a time, an XID 79 line as the driver prints it is written into its kernel log, and the time to
its wave's ``gate.tripped`` arriving from the GATES stream is recorded.

The baseline, measured in the same run and interleaved with the agents' trials: the same
health report (XID 79 on a canary of a wave of its own) published straight to JetStream, as
``bench gate`` publishes its hard-rule samples. ``ratio_p50`` = agent p50 / baseline p50: what
the agent's path adds (waking on the line, its cycle, its spool, its publish) to the bus and
the gate's own latency.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nats
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy

from lockstep_bench.agent import fake_nvml, fake_root
from lockstep_bench.gate_service import CANARY, CONTROL, _body, _settings
from lockstep_bench.ingest import percentile
from lockstep_cli.polling import until
from lockstep_cli.scratch import drop_namespace
from lockstep_common import subjects
from lockstep_common.subjects import Namespace
from lockstep_devstack import agents
from lockstep_healthgate.app import create_app
from lockstep_healthgate.testing.reports import Fault, report
from lockstep_healthgate.testing.waves import planned_wave

SITE = "bench-site"
CADENCE_S = 10.0
GOAL_P99_S = 2.0
XID_LINE = "NVRM: Xid (PCI:0000:9b:00): 79, pid=2024380, name=python3, GPU has fallen off the bus."
XID_79 = Fault(xids={"79": 1})
KINDS = ("agent", "direct")


@contextlib.contextmanager
def _nvml_stand_in() -> Iterator[None]:
    """The agents' NVML answers for 8 GPUs (this machine may have none), as in the CPU bench."""
    from lockstep_agent.probes import nvml

    loader = nvml._load
    stand_in = fake_nvml()
    nvml._load = lambda: stand_in
    try:
        yield
    finally:
        nvml._load = loader


def _agent_config(base: Path, node: str, nats_url: str, namespace: str) -> Any:
    from lockstep_agent.config import AgentConfig

    (seed,) = agents.enroll(base / "enrol", {node: SITE})
    root = fake_root(base / node / "root")
    kmsg = root / "dev" / "kmsg"
    kmsg.unlink()
    os.mkfifo(kmsg)
    return AgentConfig(
        node=node,
        site=SITE,
        namespace=namespace,
        nats_url=nats_url,
        nkey_file=seed,
        data_dir=base / node / "data",
        cadence_s=CADENCE_S,
        root=root,
    )


async def _plan_waves(app: Any, js: JetStreamContext, ns: Namespace, trials: int) -> dict[str, str]:
    """One wave per trial and kind (rollout -> its first canary): the agent's node, or for the
    baseline a node whose report is published straight, four more canaries, ten controls."""
    waves: dict[str, str] = {}
    for k in range(trials):
        for kind in KINDS:
            others = [f"x{k}{kind[0]}-{i:02d}" for i in range(CANARY + CONTROL - 1)]
            node, rollout = f"xid-{kind}-{k:03d}", f"bench-xid-{kind}-{k}"
            waves[rollout] = node
            wave = planned_wave(rollout, [node, *others[: CANARY - 1]], others[CANARY - 1 :])
            subject, body, msg_id = _body(wave, subjects.wave_planned(rollout))
            await js.publish(ns.wire(subject), body, headers={"Nats-Msg-Id": msg_id})

    async def planned() -> bool:
        n = await app.require().pool.fetchval("SELECT count(*) FROM waves")
        return bool(n == len(waves))

    await until(planned, timeout_s=60, what="the waves planned", poll_s=0.05)
    return waves


async def _start_agents(
    base: Path, nats_url: str, namespace: str, trials: int
) -> tuple[list[Any], list[asyncio.Task[None]], dict[str, int]]:
    """The agents, reporting; each one's kernel log open for writing (node -> descriptor)."""
    from lockstep_agent.runner import Runner

    runners: list[Runner] = []
    tasks: list[asyncio.Task[None]] = []
    for k in range(trials):
        node = f"xid-agent-{k:03d}"
        runner = Runner(_agent_config(base, node, nats_url, namespace))
        runners.append(runner)
        tasks.append(asyncio.create_task(runner.run(), name=node))

    async def reporting() -> bool:
        return all(r.agent.sequence >= 1 and not len(r.spool) for r in runners)

    await until(reporting, timeout_s=120, what="every agent's first report")
    kmsgs = {  # each agent follows its kernel log by now: there is a reader
        r.config.node: os.open(r.config.root / "dev" / "kmsg", os.O_WRONLY | os.O_NONBLOCK)
        for r in runners
    }
    return runners, tasks, kmsgs


class _Trips:
    """When each rollout's ``gate.tripped`` arrived (``perf_counter``)."""

    def __init__(self) -> None:
        self.at: dict[str, float] = {}

    async def on_gate(self, msg: Msg) -> None:
        data = json.loads(msg.data)
        if data.get("type", "").endswith("gate.tripped"):
            self.at.setdefault(data["data"]["rollout_id"], time.perf_counter())

    async def since(self, rollout: str, started: float) -> float:
        async def seen() -> bool:
            return rollout in self.at

        await until(seen, timeout_s=60, what=f"gate.tripped of {rollout}", poll_s=0.005)
        if self.at[rollout] < started:
            raise RuntimeError(f"{rollout} tripped before its XID was written: not measured")
        return self.at[rollout] - started


async def one_run(nats_url: str, database_url: str, trials: int) -> dict[str, Any]:
    """``trials`` agent trials and as many baseline ones, interleaved, in a fresh namespace."""
    namespace = f"bx{uuid.uuid4().hex[:8]}"
    ns = Namespace(namespace)
    app = create_app(_settings(nats_url, database_url, namespace, 256))
    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    rng = random.Random(0)  # noqa: S311 - synthetic readings, not secrets
    runners: list[Any] = []
    tasks: list[asyncio.Task[None]] = []
    trips = _Trips()
    seconds: dict[str, list[float]] = {kind: [] for kind in KINDS}
    with tempfile.TemporaryDirectory(prefix="lockstep-bench-xid-") as work, _nvml_stand_in():
        try:
            await app.start()
            sub = await js.subscribe(
                ns.wire("gate.>"),
                cb=trips.on_gate,
                ordered_consumer=True,
                deliver_policy=DeliverPolicy.NEW,
            )
            waves = await _plan_waves(app, js, ns, trials)
            runners, tasks, kmsgs = await _start_agents(Path(work), nats_url, namespace, trials)
            for k in range(trials):
                for kind in ("direct", "agent"):
                    rollout = f"bench-xid-{kind}-{k}"
                    node = waves[rollout]
                    started = time.perf_counter()
                    if kind == "agent":
                        line = f"3,{1000 + k},{int(time.time() * 1e6)},-;{XID_LINE}\n"
                        os.write(kmsgs[node], line.encode())
                    else:
                        r = report(node, datetime.now(UTC), 1, rng, site=SITE, fault=XID_79)
                        subject, body, msg_id = _body(r, subjects.health_observed(SITE, node))
                        await js.publish(ns.wire(subject), body, headers={"Nats-Msg-Id": msg_id})
                    seconds[kind].append(await trips.since(rollout, started))
            for fd in kmsgs.values():
                os.close(fd)
            await sub.unsubscribe()
        finally:
            for runner in runners:
                runner.stop.set()
            for task in tasks:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(task, 30)
            await app.stop()
            await nc.close()
            await drop_namespace(nats_url, database_url, namespace)
    return _figures(seconds["agent"], seconds["direct"])


def _figures(agent_s: list[float], direct_s: list[float]) -> dict[str, Any]:
    def ms(values: list[float], q: float) -> float | None:
        return percentile([v * 1000 for v in values], q)

    agent_p50, direct_p50 = ms(agent_s, 0.5), ms(direct_s, 0.5)
    return {
        "xid_trials": len(agent_s),
        "xid_to_trip_p50_ms": agent_p50,
        "xid_to_trip_p99_ms": ms(agent_s, 0.99),
        "xid_to_trip_max_ms": ms(agent_s, 1.0),
        "direct_report_to_trip_p50_ms": direct_p50,
        "direct_report_to_trip_p99_ms": ms(direct_s, 0.99),
        "xid_ratio_p50": round(agent_p50 / direct_p50, 2) if agent_p50 and direct_p50 else None,
        "xid_cadence_s": CADENCE_S,
        "goal_xid_to_trip_p99_ms": GOAL_P99_S * 1000,
    }
