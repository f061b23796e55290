"""The healthgate service on real NATS and PostgreSQL: health samples and waves in, gate.* out."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import nats
import pytest
from nats.aio.client import Client as NatsClient
from typer.testing import CliRunner

from lockstep_cli.main import app as cli_app
from lockstep_cli.polling import until
from lockstep_common import subjects
from lockstep_common.envelope import Envelope, EventData, make_envelope
from lockstep_common.events.v1 import (
    DeviceFailed,
    GatePassed,
    HealthObserved,
    WaveCompleted,
)
from lockstep_common.provenance import source_for
from lockstep_common.service import ServiceApp
from lockstep_common.subjects import Namespace
from lockstep_common.vocabulary import Component, DeviceOutcome, GateVerdict
from lockstep_healthgate.adapters import partitions
from lockstep_healthgate.app import create_app
from lockstep_healthgate.settings import Settings
from lockstep_healthgate.testing.reports import Fault
from lockstep_healthgate.testing.waves import planned_wave, rounds

pytestmark = pytest.mark.integration
CANARY = [f"can-{i}" for i in range(6)]
CONTROL = [f"ctl-{i}" for i in range(12)]
NODES = CANARY + CONTROL


def settings(servers: Any, namespace: str) -> Settings:
    return Settings(
        nats_url=servers.nats_url,
        database_url=servers.database_url,
        namespace=namespace,
        db_schema=f"{namespace}_healthgate",
        baseline_s=300,
        eval_poll_s=0.1,
        eval_grace_s=0.5,
        consumer_fetch_timeout_s=0.2,
        relay_poll_s=0.2,
        shutdown_grace_s=5,
        log_json=False,
    )


@dataclass
class Bus:
    nc: NatsClient
    ns: Namespace

    async def publish(
        self, subject: str, data: EventData, *, at: datetime | None = None
    ) -> Envelope[EventData]:
        env = make_envelope(data, source=source_for(data), occurred_at=at)
        await self.again(subject, env)
        return env

    async def again(self, subject: str, env: Envelope[EventData], copy: str = "") -> None:
        """Publish an envelope; ``copy`` gives a redelivery its own JetStream message id."""
        await self.nc.jetstream().publish(
            self.ns.wire(subject), env.to_json(), headers={"Nats-Msg-Id": f"{env.event_id}{copy}"}
        )

    async def reports(self, reports: Sequence[HealthObserved]) -> None:
        for r in reports:
            await self.publish(subjects.health_observed(r.site, r.node_id), r)


@pytest.fixture
async def bus(servers: Any, namespace: str) -> AsyncIterator[Bus]:
    nc = await nats.connect(servers.nats_url)
    try:
        yield Bus(nc, Namespace(namespace))
    finally:
        await nc.close()


async def started(servers: Any, namespace: str) -> ServiceApp:
    app = create_app(settings(servers, namespace))
    await app.start()
    return app


async def gate_events(app: ServiceApp) -> list[tuple[str, dict[str, Any]]]:
    rows = await app.require().pool.fetch(
        "SELECT subject, payload FROM outbox WHERE subject LIKE 'gate.%' ORDER BY id"
    )
    return [(r["subject"], json.loads(r["payload"])["data"]) for r in rows]


async def wave_state(app: ServiceApp, rollout: str) -> str | None:
    state: str | None = await app.require().pool.fetchval(
        "SELECT state FROM waves WHERE rollout_id = $1 AND wave = 0", rollout
    )
    return state


async def processed(app: ServiceApp, node: str, heartbeat: int) -> bool:
    return bool(
        await app.require().pool.fetchval(
            "SELECT count(*) FROM health_samples WHERE node_id = $1 AND heartbeat = $2",
            node,
            float(heartbeat),
        )
    )


async def _cli(*args: str) -> tuple[int, str]:
    result = await asyncio.to_thread(CliRunner().invoke, cli_app, list(args))
    return result.exit_code, result.output


async def one_shown(*args: str) -> dict[str, Any]:
    """The one verdict `gate show ... --json` prints."""
    code, out = await _cli("gate", "show", *args)
    assert code == 0, out
    (shown,) = json.loads(out)
    assert isinstance(shown, dict)
    return shown


async def hits_shown(rollout: str) -> list[tuple[str, str, float, float, datetime]]:
    """(rule, node, value, threshold, at) of each hard-rule hit `gate show --json` prints."""
    code, out = await _cli("gate", "show", rollout, "--json")
    assert code == 0, out
    (shown,) = json.loads(out)
    return [
        (r["rule"], h["node"], h["value"], h["threshold"], datetime.fromtimestamp(h["at"], UTC))
        for r in shown["decision"]["rules"]
        for h in r["hits"]
    ]


def too_little_data_at_trip(shown: str | dict[str, Any]) -> None:
    """A hard-rule verdict's ``at_trip`` evidence, labelled, every metric of the policy with too
    little data or none (no comparison made up): in `gate show`'s text, or its --json decision."""
    if isinstance(shown, str):
        assert "evidence at trip time" in shown and "metrics at the trip (evidence only" in shown
        assert "nccl_busbw_gbps [gb200/acme/0000] no_data: too little data" in shown
        return
    trip = shown["at_trip"]
    assert "did not decide it (the hard rule did)" in trip["label"]
    assert {j["metric"] for j in trip["metrics"]} >= {"nccl_busbw_gbps", "sm_clock_mhz"}
    # r2's wave was planned after the last reports: nothing in its window, so not judged.
    assert {j["outcome"] for j in trip["metrics"]} == {"not_reported"}
    assert all(j["comparison"] is None for j in trip["metrics"])


async def test_a_hard_rule_trips_the_wave_once_however_often_it_is_delivered(
    servers: Any, namespace: str, bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = await started(servers, namespace)
    try:
        now = datetime.now(UTC) - timedelta(seconds=60)  # reports are never from the future
        plan = planned_wave("r1", CANARY, CONTROL)
        await bus.publish(subjects.wave_planned("r1"), plan, at=now - timedelta(seconds=5))
        await until(lambda: wave_state(app, "r1"), what="wave recorded")
        await bus.reports(rounds(NODES, now, 2))
        (bad,) = rounds(
            ["can-2"], now + timedelta(seconds=1), 1, faults={"can-2": Fault(xids={"79": 1})}
        )
        env = await bus.publish(subjects.health_observed("site-a", "can-2"), bad)
        await bus.again(subjects.health_observed("site-a", "can-2"), env, copy="-redelivered")
        await until(lambda: gate_events(app), what="gate.tripped committed")
        # A later report with the same fault, then a marker: everything before it is applied.
        later = rounds(
            ["can-2"],
            now + timedelta(seconds=2),
            1,
            faults={"can-2": Fault(xids={"79": 1})},
            first_heartbeat=7,
        )
        await bus.reports(later)
        await bus.reports(rounds(["ctl-0"], now + timedelta(seconds=23), 1, first_heartbeat=99))
        await until(lambda: processed(app, "ctl-0", 99), what="marker report stored")
        ((subject, data),) = await gate_events(app)
        assert subject == "gate.tripped.r1"
        assert data["offending_nodes"] == ["can-2"] and data["wave"] == 0
        assert "XID 79" in data["evidence"][0]["detail"]
        row = await app.require().pool.fetchrow("SELECT verdict, kind FROM verdicts")
        assert row is not None and (row["verdict"], row["kind"]) == ("tripped", "hard_rule")
        assert await wave_state(app, "r1") == "decided"
        # Samples went to today's day partition, created by the service.
        part = partitions.partition_name(partitions.day_of(now))
        assert await app.require().pool.fetchval(f"SELECT count(*) FROM {part}") > 0

        # A device that failed after activation trips its own rollout's wave too.
        await bus.publish(subjects.wave_planned("r2"), planned_wave("r2", CANARY, CONTROL))
        await until(lambda: wave_state(app, "r2"), what="second wave recorded")
        failed = DeviceFailed(
            rollout_id="r2",
            node_id="can-4",
            component=Component.GPU_VBIOS,
            to_version="96.00.1",
            step="verify",
            reason="device unreadable after activation",
        )
        await bus.publish(subjects.device(DeviceOutcome.FAILED, "r2", "can-4"), failed)
        await until(lambda: _count(gate_events(app), 2), what="device.failed trips r2")
        subject, data = (await gate_events(app))[1]
        assert subject == "gate.tripped.r2" and data["offending_nodes"] == ["can-4"]

        # `lockstep gate show` shows the persisted verdicts and says why ...
        # ... asked of the healthgate over the bus: the CLI has no database to reach.
        monkeypatch.setenv("LOCKSTEP_NATS_URL", servers.nats_url)
        monkeypatch.setenv("LOCKSTEP_NAMESPACE", namespace)
        monkeypatch.setenv("LOCKSTEP_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
        code, out = await _cli("gate", "show", "r1")
        assert code == 0, out
        assert "tripped" in out and "hard rule" in out and "can-2" in out and "XID 79" in out
        assert "heartbeat rule not evaluated" not in out  # left out at ingest on purpose
        # The judge's comparison as of the trip, under its label: two reports a node by then,
        # under the policy's three, so each metric says it had too little data.
        too_little_data_at_trip(out)
        # --json carries each hard-rule hit (issue 32's timeline): the node, the rule, the
        # reading against the rule's threshold and that reading's time (the bad report's).
        assert await hits_shown("r1") == [("fatal_xid", "can-2", 1.0, 0.0, bad.observed_at)]
        shown = await one_shown("r2", "--wave", "0", "--json")
        assert (shown["verdict"], shown["kind"]) == ("tripped", "hard_rule")
        assert shown["decision"]["offending_nodes"] == ["can-4"]
        too_little_data_at_trip(shown["decision"])  # the same, as --json prints it
        assert (await _cli("gate", "show", "r3"))[0] == 1  # no verdict yet
        code, out = await _cli("gate", "show", "r1.*")
        assert code == 2 and "rollout id" in out
    finally:
        await app.stop()


async def test_a_verdict_id_taken_before_the_trip_does_not_hide_it(
    servers: Any, namespace: str, bus: Bus
) -> None:
    """Issue 26: the gate's event id was uuid5 of rollout and wave; a row written first under
    it made the genuine gate.tripped vanish (the outbox skipped the id)."""
    app = await started(servers, namespace)
    try:
        now = datetime.now(UTC) - timedelta(seconds=60)
        await bus.publish(
            subjects.wave_planned("r1"),
            planned_wave("r1", CANARY, CONTROL),
            at=now - timedelta(seconds=5),
        )
        await until(lambda: wave_state(app, "r1"), what="wave recorded")
        predicted = uuid.uuid5(uuid.NAMESPACE_URL, "lockstep:gate:r1:0")
        forged = make_envelope(
            GatePassed(rollout_id="r1", wave=0, verdict=GateVerdict.PASSED, evidence=()),
            source="/lockstep/healthgate",
            event_id=predicted,
        )
        await app.require().pool.execute(
            "INSERT INTO outbox (event_id, subject, payload, published_at)"
            " VALUES ($1, 'gate.passed.r1', $2, now())",
            predicted,
            forged.to_json(),
        )
        await bus.reports(rounds(NODES, now, 2))
        bad = rounds(
            ["can-2"], now + timedelta(seconds=1), 1, faults={"can-2": Fault(xids={"79": 1})}
        )
        await bus.reports(bad)
        await until(lambda: _count(gate_events(app), 2), what="the genuine gate.tripped")
        subjects_emitted = [subject for subject, _ in await gate_events(app)]
        assert subjects_emitted == ["gate.passed.r1", "gate.tripped.r1"]
        assert await wave_state(app, "r1") == "decided"
    finally:
        await app.stop()


async def test_a_fault_reported_for_a_canary_from_another_nodes_subject_changes_no_gate(
    servers: Any, namespace: str, bus: Bus
) -> None:
    """Issue 26: a health report with XID 79 for a canary, published by any agent credential,
    tripped a healthy rollout. The subject names the node that spoke; the payload must too."""
    app = await started(servers, namespace)
    try:
        now = datetime.now(UTC) - timedelta(seconds=60)
        await bus.publish(
            subjects.wave_planned("r1"),
            planned_wave("r1", CANARY, CONTROL),
            at=now - timedelta(seconds=5),
        )
        await until(lambda: wave_state(app, "r1"), what="wave recorded")
        await bus.reports(rounds(NODES, now, 2))
        (forged,) = rounds(
            ["can-2"],
            now + timedelta(seconds=1),
            1,
            faults={"can-2": Fault(xids={"79": 1})},
            first_heartbeat=50,
        )
        await bus.publish(subjects.health_observed(forged.site, "ctl-3"), forged)
        await bus.reports(rounds(["ctl-0"], now + timedelta(seconds=23), 1, first_heartbeat=99))
        await until(lambda: processed(app, "ctl-0", 99), what="marker report stored")
        await until(lambda: _letters(app), what="the forged report dead-lettered")
        reason = await app.require().pool.fetchval("SELECT reason FROM dead_letters")
        assert "its payload belongs on telemetry.observed.health" in reason
        assert await gate_events(app) == []
        assert await wave_state(app, "r1") == "updating"
        assert not await processed(app, "can-2", 50)
    finally:
        await app.stop()


async def _letters(app: ServiceApp) -> bool:
    return bool(await app.require().pool.fetchval("SELECT count(*) FROM dead_letters"))


async def _count(rows: Any, n: int) -> bool:
    return len(await rows) >= n


async def test_a_soaked_wave_is_judged_once_across_a_restart(
    servers: Any, namespace: str, bus: Bus
) -> None:
    app = await started(servers, namespace)
    now = datetime.now(UTC)
    planned_at = now - timedelta(seconds=120)
    completed_at = now - timedelta(seconds=25)
    soak = 35  # due 10 s from now: the service restarts in the middle of the soak
    try:
        await bus.publish(
            subjects.wave_planned("r1"),
            planned_wave("r1", CANARY, CONTROL, soak_seconds=soak),
            at=planned_at,
        )
        await bus.reports(rounds(NODES, planned_at - timedelta(seconds=100), 10, seed=1))
        await bus.reports(rounds(NODES, completed_at, 6, interval_s=5, seed=2, first_heartbeat=20))
        done = WaveCompleted(rollout_id="r1", wave=0, succeeded=tuple(CANARY), failed=())
        await bus.publish(subjects.wave_completed("r1"), done, at=completed_at)
        await until(lambda: _is(wave_state(app, "r1"), "soaking"), what="soak started")
    finally:
        await app.stop()
    app = await started(servers, namespace)
    try:
        assert await wave_state(app, "r1") == "soaking"  # not judged before the restart
        await bus.reports(rounds(NODES, now, 1, seed=3, first_heartbeat=30))
        await until(lambda: gate_events(app), what="gate verdict after the soak", timeout_s=40)
        ((subject, data),) = await gate_events(app)
        reason = await app.require().pool.fetchval("SELECT reason FROM verdicts")
        assert subject == "gate.passed.r1", reason
        assert data["verdict"] == "passed" and data["offending_nodes"] == []
        row = await app.require().pool.fetchrow(
            "SELECT kind, window_start, window_end, decision FROM verdicts"
        )
        assert row is not None and row["kind"] == "soak"
        assert row["window_end"] - row["window_start"] == timedelta(seconds=soak)
        decision = json.loads(row["decision"])
        assert {m["metric"] for m in decision["metrics"]} >= {"nccl_busbw_gbps", "gpu_power_w"}
        # The verdict reaches the GATES stream, once.
        msg = await app.require().js.get_last_msg(
            app.namespace.stream("GATES"), app.namespace.wire("gate.passed.r1")
        )
        assert msg.data is not None and json.loads(msg.data)["data"]["verdict"] == "passed"
    finally:
        await app.stop()


async def _is(value: Any, expected: str) -> bool:
    return bool(await value == expected)
