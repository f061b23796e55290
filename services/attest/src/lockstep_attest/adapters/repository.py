"""The attest store on PostgreSQL (migrations/0001_attest.sql): jobs, verdicts, pins.

``PostgresStore`` opens a transaction on a pooled connection whose events go to the outbox
(``outbox.emitting``); ``joined`` runs a handler in the consumer runtime's own transaction.
Job states are spelled only by ``domain.jobs.JobState`` (passed as parameters, or written into
the claim statement from the enum, see ``_CLAIMABLE``), and every state change is checked by
``domain.jobs.transition`` on the state read under the row's lock.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from lockstep_attest.domain.jobs import INITIAL, JobState, transition
from lockstep_attest.store import Job, VerdictRow
from lockstep_common.db import Conn
from lockstep_common.events.v1 import CheckVerdict
from lockstep_common.outbox import EventSink
from lockstep_common.stores import JoinedAt, PooledStore
from lockstep_common.vocabulary import CheckResult


def _constant(state: JobState) -> str:
    return "'" + state.value.replace("'", "''") + "'"


# The claimable states are written into this statement from the enum, not passed as parameters:
# the planner must see them as constants to use the partial index jobs_open (state <> 'done').
# A prepared statement switches to a generic plan after five runs, and the generic plan of the
# parameterised form walks the primary key past every finished job (20,000 done jobs: 1.7 ms
# per claim instead of 0.03 ms, growing with the history, on every poll).
_CLAIMABLE = (
    f"SELECT id, state FROM jobs WHERE state = {_constant(JobState.PENDING)}"
    f" OR (state = {_constant(JobState.RUNNING)} AND lease_until < now())"
    " ORDER BY id FOR UPDATE SKIP LOCKED LIMIT 1"
)


class PostgresStore(PooledStore["PostgresTx"]):
    """An ``AttestStore`` on the service's pool (its connections' search_path is the schema)."""

    def __init__(self, pool: asyncpg.Pool, source: str) -> None:
        super().__init__(pool, source, PostgresTx)


@dataclass(frozen=True, slots=True)
class PostgresTx:
    """An ``AttestTx`` on a connection inside an open transaction."""

    conn: Conn
    events: EventSink

    async def add_job(
        self, event_id: uuid.UUID, uri: str, by: str, correlation: str | None
    ) -> None:
        """Record a submission (once per event id)."""
        await self.conn.execute(
            "INSERT INTO jobs (event_id, bundle_uri, submitted_by, correlation_id, state)"
            " VALUES ($1, $2, $3, $4, $5) ON CONFLICT (event_id) DO NOTHING",
            event_id,
            uri,
            by,
            correlation,
            INITIAL.value,
        )

    async def claim_job(self, lease_s: float) -> Job | None:
        """Claim the oldest pending job, or one whose holder's lease ran out (level-triggered)."""
        row = await self.conn.fetchrow(_CLAIMABLE)
        if row is None:
            return None
        state = transition(JobState(row["state"]), JobState.RUNNING)
        # The lease deadline comes from PostgreSQL's clock, the one every claimer compares with.
        claimed = await self.conn.fetchrow(
            "UPDATE jobs SET state = $2, attempts = attempts + 1, lease_token = lease_token + 1,"
            " lease_until = now() + make_interval(secs => $3) WHERE id = $1"
            " RETURNING id, lease_token, attempts, bundle_uri, submitted_by, correlation_id",
            row["id"],
            state.value,
            lease_s,
        )
        assert claimed is not None  # noqa: S101 - the row is locked by the SELECT above
        return Job(
            claimed["id"],
            claimed["lease_token"],
            claimed["attempts"],
            claimed["bundle_uri"],
            claimed["submitted_by"],
            claimed["correlation_id"],
        )

    async def still_holds(self, job: Job) -> bool:
        """Lock the job row and check our claim was not taken over (the fence)."""
        token = await self.conn.fetchval(
            "SELECT lease_token FROM jobs WHERE id = $1 FOR UPDATE", job.id
        )
        return bool(token == job.token)

    async def save_verdict(self, verdict: VerdictRow, checks: list[CheckVerdict]) -> int:
        """Insert the verdict and its checks; mark the job done. Returns the verdict id."""
        current = await self.conn.fetchval(
            "SELECT state FROM jobs WHERE id = $1 FOR UPDATE", verdict.job_id
        )
        done = transition(JobState(current), JobState.DONE)
        v = verdict
        verdict_id: int = await self.conn.fetchval(
            "INSERT INTO verdicts (job_id, bundle_digest, context_digest, bundle_uri, submitted_by,"
            " bundle_id, bundle_version, stack_hash, accepted, reused_from, manifest, read_ms,"
            " started_at) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11::jsonb,$12,$13) RETURNING id",
            v.job_id,
            v.bundle_digest,
            v.context_digest,
            v.bundle_uri,
            v.submitted_by,
            v.bundle_id,
            v.bundle_version,
            v.stack_hash,
            v.accepted,
            v.reused_from,
            json.dumps(v.manifest) if v.manifest is not None else None,
            v.read_ms,
            v.started_at,
        )
        await self.conn.executemany(
            "INSERT INTO verdict_checks"
            " (verdict_id, position, check_name, result, reason, duration_ms)"
            " VALUES ($1, $2, $3, $4, $5, $6)",
            [
                (verdict_id, i, c.check, c.result.value, c.reason, c.duration_ms)
                for i, c in enumerate(checks)
            ],
        )
        await self.conn.execute(
            "UPDATE jobs SET state = $3, finished_at = now(), verdict_id = $2 WHERE id = $1",
            v.job_id,
            verdict_id,
            done.value,
        )
        return verdict_id

    async def reusable_verdict(self, digest: str, context: str, max_age_s: float) -> int | None:
        """A recent verdict for byte-identical evidence under the same policy and trust."""
        value = await self.conn.fetchval(
            "SELECT id FROM verdicts WHERE bundle_digest = $1 AND context_digest = $2"
            " AND reused_from IS NULL AND finished_at > now() - make_interval(secs => $3)"
            " ORDER BY finished_at DESC LIMIT 1",
            digest,
            context,
            max_age_s,
        )
        return int(value) if value is not None else None

    async def checks_of(self, verdict_id: int) -> list[CheckVerdict]:
        """The checks recorded for a verdict, in order."""
        rows = await self.conn.fetch(
            "SELECT check_name, result, reason, duration_ms FROM verdict_checks"
            " WHERE verdict_id = $1 ORDER BY position",
            verdict_id,
        )
        return [
            CheckVerdict(
                check=r["check_name"],
                result=CheckResult(r["result"]),
                reason=r["reason"],
                duration_ms=r["duration_ms"],
            )
            for r in rows
        ]

    async def record_pin(self, stack_hash: str, site: str, at: datetime) -> None:
        """Remember that a stack is pinned somewhere (for anti-rollback)."""
        await self.conn.execute(
            "INSERT INTO pinned (stack_hash, site, pinned_at) VALUES ($1, $2, $3)"
            " ON CONFLICT (stack_hash, site)"
            " DO UPDATE SET pinned_at = GREATEST(pinned.pinned_at, $3)",
            stack_hash,
            site,
            at,
        )

    async def pinned_manifest(self, bundle_id: str) -> tuple[str, object] | None:
        """(stack hash, manifest JSON) of the most recently pinned attested bundle of this line."""
        row = await self.conn.fetchrow(
            "SELECT v.stack_hash, v.manifest FROM pinned p"
            " JOIN verdicts v ON v.stack_hash = p.stack_hash AND v.accepted"
            " WHERE v.bundle_id = $1 ORDER BY p.pinned_at DESC, v.id DESC LIMIT 1",
            bundle_id,
        )
        return None if row is None else (row["stack_hash"], json.loads(row["manifest"]))


joined = JoinedAt(PostgresTx)
"""``joined(handler)``: ``handler`` run in the consumer runtime's transaction (its inbox claim
and outbox), with ``now`` from the system clock."""
