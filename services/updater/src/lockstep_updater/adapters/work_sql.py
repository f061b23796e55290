"""The SQL the updater's queries share: state lists written from ``domain.steps``, the claim
order, the guard's facts in one round trip, the wake of parked items, and a claimed row as a
:class:`~lockstep_updater.store.Claim`.
"""

from __future__ import annotations

import json

import asyncpg

from lockstep_updater.domain.steps import (
    OUT_OF_SERVICE,
    TERMINAL,
    NodeStep,
    transition,
)
from lockstep_updater.store import Claim


def sql_list(states: frozenset[NodeStep]) -> str:
    return ", ".join("'" + s.value + "'" for s in sorted(states))


# Written from the enum, not passed as parameters, so the planner sees constants and uses the
# partial index node_work_open (as attest's jobs_open, adapters/repository.py there).
CLAIMABLE = (
    f"SELECT id FROM node_work WHERE state NOT IN ({sql_list(TERMINAL)})"
    # Free: no lease, or its end passed (updated_at is never in the future); written as the
    # ready time so that the index in claim order (migration 0008) serves it.
    " AND COALESCE(lease_until, updated_at) <= now()"
    # Longest ready first (since its lease ended, its retry pause ended or its step was
    # committed): a node polling its drain must not starve the nodes behind it.
    " ORDER BY COALESCE(lease_until, updated_at), id FOR UPDATE SKIP LOCKED LIMIT 1"
)
OUT_STATES = sql_list(OUT_OF_SERVICE)
TERMINAL_NAMES = frozenset(s.value for s in TERMINAL)
FAILED_STATES = sql_list(frozenset({NodeStep.FAILED, NodeStep.QUARANTINED}))
# The guard's facts (domain.guard.Facts) of item $5, node $3 of wave $2 of rollout $1, pool $4,
# and the item recorded in pool $4 in the same round trip (what is read counts the pool's
# other items only; a data-modifying WITH runs once whether or not it is read, PostgreSQL
# manual 7.8.4).
GUARD_FACTS = (
    "WITH placed AS (UPDATE node_work SET pool = $4 WHERE id = $5)"
    " SELECT w.in_wave, w.max_unavailable, w.failure_budget,"
    " p.rollout_id IS NOT NULL AS has_plan, p.in_plan, p.approved_wave,"
    " (SELECT reason FROM halts WHERE rollout_id = $1) AS halted,"
    " (SELECT count(*) FROM node_work WHERE rollout_id = $1 AND wave = $2"
    f"  AND kind = 'update' AND state IN ({FAILED_STATES})) AS failures,"
    " (SELECT count(*) FROM node_work WHERE pool = $4 AND id <> $5"
    f"  AND state IN ({OUT_STATES})) AS others_out,"
    " (SELECT rollout_id FROM node_work WHERE node_id = $3 AND id <> $5 AND kind = 'remedy'"
    f"  AND state IN ({OUT_STATES}) LIMIT 1) AS busy"
    " FROM (SELECT 1) AS one"
    " LEFT JOIN LATERAL (SELECT $3 = ANY(node_ids) AS in_wave, max_unavailable,"
    "  failure_budget FROM waves WHERE rollout_id = $1 AND wave = $2) AS w ON true"
    " LEFT JOIN LATERAL (SELECT rollout_id, $3 = ANY(node_ids) AS in_plan,"
    "  (node_waves ->> $3)::int AS approved_wave FROM plans WHERE rollout_id = $1) AS p ON true"
)
# A place in pool $1's out-of-service budget freed: the nodes parked longest for one become
# claimable, as many as there are free places (at least one), not every parked node of the
# pool. Waking them all (1,400 in a 2,000-node fleet's last wave) had every one claimed, its
# node read from the inventory and its budget checked to take one place, at every place that
# freed. Counting the free places, not one per freed place, makes up for a wake whose node
# did not take its place (it failed, or waits for the inventory).
WAKE_PARKED = (
    "UPDATE node_work SET parked = false, lease_until = now() WHERE id IN ("
    " SELECT id FROM node_work WHERE pool = $1 AND parked"
    " ORDER BY COALESCE(lease_until, updated_at), id"
    " LIMIT GREATEST(1,"
    "  (SELECT COALESCE(max(w.max_unavailable), 1) FROM node_work n"
    "   JOIN waves w ON w.rollout_id = n.rollout_id AND w.wave = n.wave"
    "   WHERE n.pool = $1 AND n.parked)"
    f"  - (SELECT count(*) FROM node_work WHERE pool = $1 AND state IN ({OUT_STATES}))))"
)
CLAIM_COLUMNS = (
    "id, rollout_id, wave, node_id, state, lease_token, attempts, components, progress,"
    " correlation_id, kind"
)
FIRST_STEP = transition(NodeStep.PENDING, NodeStep.PREFLIGHT)  # checked once, on import
# The claim of the longest ready item, in one round trip: its row locked (``CLAIMABLE``, an
# InitPlan run once) and claimed in the same statement; a pending item begins its first step.
CLAIM = (
    "UPDATE node_work SET"
    f" state = CASE WHEN state = '{NodeStep.PENDING.value}' THEN '{FIRST_STEP.value}'"
    " ELSE state END,"
    " attempts = attempts + 1, parked = false, lease_token = lease_token + 1,"
    " claimed_at = now(), updated_at = now(), lease_until = now() + make_interval(secs => $1)"
    f" WHERE id = ({CLAIMABLE}) RETURNING {CLAIM_COLUMNS}"
)

# The move of item $1 from step $9 to step $2 and its history row, in one round trip (a
# claim's steps each end here: three statements had it cost three). The item's row is locked
# and read as it was (its claimed_at, its pool) in the same statement; no row comes back when
# the item is no longer in step $9, and nothing is written. The token moves on at the release
# too: the claim that ended the step holds nothing any more (its still_holds is False), so it
# cannot act after it. Kept ($7), the item is claimed again in this write, as ``claim`` does.
ADVANCE = (
    "WITH was AS (SELECT id, claimed_at, pool FROM node_work WHERE id = $1 AND state = $9"
    " FOR UPDATE),"
    " moved AS (UPDATE node_work n SET state = $2, reason = $3,"
    " lease_token = n.lease_token + 1, progress = COALESCE($4::jsonb, n.progress),"
    " updated_at = now(), parked = $6,"
    " lease_until = CASE WHEN $7 THEN now() + make_interval(secs => $8)"
    " WHEN $5 > 0 THEN now() + make_interval(secs => $5) END,"
    " attempts = n.attempts + $7::int,"
    " claimed_at = CASE WHEN $7 THEN now() ELSE n.claimed_at END"
    " FROM was WHERE n.id = was.id"
    f" RETURNING {', '.join('n.' + c.strip() for c in CLAIM_COLUMNS.split(','))},"
    " was.claimed_at AS started_at, was.pool AS was_pool),"
    " history AS (INSERT INTO node_steps (work_id, node_id, rollout_id, wave, step, attempt,"
    " token, started_at, outcome, reason)"
    " SELECT id, node_id, rollout_id, wave, $9, $10, $11, COALESCE(started_at, now()), $2, $3"
    " FROM moved)"
    " SELECT * FROM moved"
)


def claim_of_row(row: asyncpg.Record) -> Claim:
    return Claim(
        row["id"],
        row["rollout_id"],
        row["wave"],
        row["node_id"],
        NodeStep(row["state"]),
        row["lease_token"],
        row["attempts"],
        tuple(row["components"]),
        json.loads(row["progress"]),
        row["correlation_id"],
        row["kind"],
    )
