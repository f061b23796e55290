"""The gauges each service reads by SQL, against its real migrated schema."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
from prometheus_client import CollectorRegistry

from lockstep_common import db
from lockstep_common.query_gauges import RUNTIME_GAUGES, QueryGauge, QueryGauges
from lockstep_healthgate.adapters.gauges import GAUGES as HEALTHGATE
from lockstep_planner.adapters.gauges import GAUGES as PLANNER
from lockstep_updater.adapters.gauges import GAUGES as UPDATER

pytestmark = pytest.mark.integration

SERVICES = {"planner": PLANNER, "updater": UPDATER, "healthgate": HEALTHGATE}


async def schema_conn(servers: Any, namespace: str, service: str) -> asyncpg.Connection:
    schema = f"{namespace}_{service}"
    conn = await asyncpg.connect(servers.database_url)
    own = db.load_migrations(service, f"lockstep_{service}.migrations")
    await db.migrate(conn, schema, db.messaging_migrations() + own)
    await conn.execute(f"SET search_path TO {db.quote_ident(schema)}")
    return conn


@pytest.fixture
async def connect(servers: Any, namespace: str) -> AsyncIterator[Any]:
    opened: list[asyncpg.Connection] = []

    async def open_(service: str) -> asyncpg.Connection:
        opened.append(await schema_conn(servers, namespace, service))
        return opened[-1]

    yield open_
    for conn in opened:
        await conn.close()


def values(gauges: QueryGauges, gauge: QueryGauge) -> dict[tuple[str, ...], float]:
    return gauges.samples(gauge.name)


@pytest.mark.parametrize("service", sorted(SERVICES))
async def test_every_query_runs_on_an_empty_schema(connect: Any, service: str) -> None:
    conn = await connect(service)
    for gauge in (*RUNTIME_GAUGES, *SERVICES[service]):
        rows = await conn.fetch(gauge.sql)  # raises on a query the schema does not support
        assert all(len(r) == len(gauge.labels) + 1 for r in rows), gauge.name


async def test_outbox_lag_and_dead_letters(connect: Any) -> None:
    conn = await connect("updater")
    await conn.execute(
        "INSERT INTO outbox (event_id, subject, payload, created_at) VALUES"
        " ($1, 's', 'x', now() - interval '10 minutes'), ($2, 's', 'y', now())",
        uuid.uuid4(),
        uuid.uuid4(),
    )
    gauges = QueryGauges(CollectorRegistry(), RUNTIME_GAUGES)
    await gauges.refresh(conn)
    pending, age, letters = RUNTIME_GAUGES
    assert values(gauges, pending) == {(): 2.0}
    assert 600 <= values(gauges, age)[()] < 660
    assert values(gauges, letters) == {(): 0.0}


async def test_updater_time_in_step_ignores_retries_of_the_same_step(connect: Any) -> None:
    conn = await connect("updater")
    await conn.execute(
        "INSERT INTO waves (rollout_id, wave, node_ids, max_unavailable, failure_budget,"
        " released_at) VALUES ('r1', 0, '{n1,n2}', 1, 1, now() - interval '2 hours')"
    )
    progress = {"components": {"gpu": {"sent": True}, "bmc": {"sent": False}}}
    work = await conn.fetchval(
        "INSERT INTO node_work (rollout_id, wave, node_id, components, state, progress) VALUES"
        " ('r1', 0, 'n1', '{gpu,bmc}', 'draining', $1) RETURNING id",
        json.dumps(progress),
    )
    await conn.execute(
        "INSERT INTO node_work (rollout_id, wave, node_id, components, state) VALUES"
        " ('r1', 0, 'n2', '{gpu}', 'preflight')"
    )
    # n3: quarantined in an older rollout, then released (its latest item); n4: quarantined.
    await conn.execute(
        "INSERT INTO node_work (rollout_id, wave, node_id, components, state, kind) VALUES"
        " ('r0', 0, 'n3', '{gpu}', 'quarantined', 'update'),"
        " ('release-1', 0, 'n3', '{}', 'done', 'release'),"
        " ('r0', 0, 'n4', '{gpu}', 'quarantined', 'update')"
    )
    step = (
        "INSERT INTO node_steps (work_id, node_id, rollout_id, wave, step, attempt, token,"
        " started_at, ended_at, outcome, reason) VALUES ($1, 'n1', 'r1', 0, $2, 1, 1,"
        " now() - make_interval(mins => $3 + 1), now() - make_interval(mins => $3), $4, '')"
    )
    await conn.execute(step, work, "staging", 50, "cordoning")
    await conn.execute(step, work, "cordoning", 30, "draining")  # entered draining 30 min ago
    await conn.execute(step, work, "draining", 1, "draining")  # a retry: still the same step
    gauges = QueryGauges(CollectorRegistry(), UPDATER)
    await gauges.refresh(conn)
    nodes, ages, quarantined, pushes = UPDATER
    assert values(gauges, nodes)[("draining",)] == 1
    assert values(gauges, nodes)[("preflight",)] == 1
    assert values(gauges, nodes)[("done",)] == 0
    age = values(gauges, ages)
    assert set(age) == {("draining",), ("preflight",)}
    assert 1800 <= age[("draining",)] < 1860
    assert 7200 <= age[("preflight",)] < 7260  # no step ended yet: since the wave's release
    assert values(gauges, pushes) == {(): 1.0}
    assert values(gauges, quarantined) == {(): 1.0}  # n4; n3 was released

    await conn.execute("UPDATE waves SET completed_at = now()")
    await gauges.refresh(conn)
    assert values(gauges, nodes)[("draining",)] == 0  # only waves in progress count
    assert values(gauges, pushes) == {(): 0.0}
    assert values(gauges, quarantined) == {(): 1.0}  # a quarantine outlives its wave


async def test_planner_idle_time_of_a_running_rollout(connect: Any) -> None:
    conn = await connect("planner")
    intent = uuid.uuid4()
    await conn.execute(
        "INSERT INTO intents (intent_id, event_id, rollout_id, payload, submitted_by,"
        " received_at) VALUES ($1, $2, 'r1', '{}', 'cli', now())",
        intent,
        uuid.uuid4(),
    )
    await conn.execute(
        "INSERT INTO rollouts (rollout_id, intent_id, stack_hash, change_class, scope, dry_run,"
        " state, plan_hash, plan, approvals_needed, created_at, updated_at) VALUES ('r1', $1,"
        " 'h', 'routine', '{}', false, 'running', 'p', '{}', 0, now() - interval '3 hours',"
        " now() - interval '2 hours')",
        intent,
    )
    await conn.execute(
        "INSERT INTO waves (rollout_id, number, state, node_ids, components, max_unavailable,"
        " failure_budget, soak_s, planned_s, strata, released_at) VALUES ('r1', 0, 'tripped',"
        " '{n1}', '{gpu}', 1, 0, 60, 60, '{}', now() - interval '90 minutes')"
    )
    await conn.execute(
        "INSERT INTO rollout_nodes (node_id, rollout_id, wave, step, step_at) VALUES"
        " ('n1', 'r1', 0, 'verified', now() - interval '45 minutes')"
    )
    gauges = QueryGauges(CollectorRegistry(), PLANNER)
    await gauges.refresh(conn)
    rollouts, waves, idle = PLANNER
    assert values(gauges, rollouts)[("running",)] == 1
    assert values(gauges, waves)[("tripped",)] == 1
    assert 2700 <= values(gauges, idle)[("r1",)] < 2760  # the last node step seen

    await conn.execute("UPDATE waves SET state = 'soaking', soak_until = now() + interval '1 hour'")
    await gauges.refresh(conn)
    assert values(gauges, idle)[("r1",)] < 5  # soaking is waiting on purpose

    await conn.execute("UPDATE rollouts SET state = 'aborted'")
    await gauges.refresh(conn)
    assert values(gauges, idle) == {}
    assert values(gauges, waves)[("soaking",)] == 0  # an aborted rollout's waves are history


async def test_healthgate_verdicts_by_verdict_and_kind(connect: Any) -> None:
    conn = await connect("healthgate")
    await conn.execute(
        "INSERT INTO waves (rollout_id, wave, state, planned_at, soak_seconds) VALUES"
        " ('r1', 0, 'decided', now(), 60), ('r1', 1, 'soaking', now(), 60)"
    )
    await conn.execute(
        "INSERT INTO verdicts (rollout_id, wave, verdict, kind, reason, decision, evaluated_at,"
        " window_start, window_end, policy_digest, event_id) VALUES ('r1', 0, 'tripped',"
        " 'hard_rule', 'xid 79', '{}', now(), now(), now(), 'd', $1)",
        uuid.uuid4(),
    )
    gauges = QueryGauges(CollectorRegistry(), HEALTHGATE)
    await gauges.refresh(conn)
    verdicts, waves, stragglers = HEALTHGATE
    assert values(gauges, verdicts)[("tripped", "hard_rule")] == 1
    assert values(gauges, verdicts)[("passed", "soak")] == 0
    assert values(gauges, waves) == {("updating",): 0, ("soaking",): 1, ("decided",): 1}
    assert values(gauges, stragglers) == {}  # no evaluation yet: no profile
    await conn.execute(
        "INSERT INTO stragglers (profile, node_ids, finding, evaluated_at) VALUES"
        " ('gb200', '{n1,n2}', '{}', now()), ('hgx-h100', '{}', '{}', now())"
    )
    await gauges.refresh(conn)
    assert values(gauges, stragglers) == {("gb200",): 2, ("hgx-h100",): 0}


async def test_a_dry_run_is_no_planned_rollout(connect: Any) -> None:
    """A plan that was only looked at (issue 31) is not counted as a rollout waiting to start."""
    conn = await connect("planner")
    for rollout_id, dry_run in (("r-dry", True), ("r-real", False)):
        intent = uuid.uuid4()
        await conn.execute(
            "INSERT INTO intents (intent_id, event_id, rollout_id, payload, submitted_by,"
            " received_at) VALUES ($1, $2, $3, '{}', 'cli', now())",
            intent,
            uuid.uuid4(),
            rollout_id,
        )
        await conn.execute(
            "INSERT INTO rollouts (rollout_id, intent_id, stack_hash, change_class, scope,"
            " dry_run, state, plan_hash, plan, approvals_needed, created_at, updated_at)"
            " VALUES ($1, $2, 'h', 'routine', '{}', $3, 'planned', 'p', '{}', 1, now(), now())",
            rollout_id,
            intent,
            dry_run,
        )
    gauges = QueryGauges(CollectorRegistry(), PLANNER)
    await gauges.refresh(conn)
    assert values(gauges, PLANNER[0])[("planned",)] == 1
