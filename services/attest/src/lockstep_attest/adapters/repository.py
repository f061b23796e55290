"""The attest service's tables (migrations/0001_attest.sql): jobs, verdicts, pins."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime

from lockstep_common.db import Conn
from lockstep_common.events.v1 import CheckVerdict
from lockstep_common.vocabulary import CheckResult


@dataclass(frozen=True, slots=True)
class Job:
    """A claimed job and the fencing token of this claim."""

    id: int
    token: int
    attempts: int
    bundle_uri: str
    submitted_by: str
    correlation_id: str | None


async def add_job(
    conn: Conn, event_id: uuid.UUID, uri: str, by: str, correlation: str | None
) -> None:
    """Record a submission (once per event id)."""
    await conn.execute(
        "INSERT INTO jobs (event_id, bundle_uri, submitted_by, correlation_id)"
        " VALUES ($1, $2, $3, $4) ON CONFLICT (event_id) DO NOTHING",
        event_id,
        uri,
        by,
        correlation,
    )


async def claim_job(conn: Conn, lease_s: float) -> Job | None:
    """Claim the oldest pending job, or one whose holder's lease ran out (level-triggered)."""
    row = await conn.fetchrow(
        "UPDATE jobs SET state = 'running', attempts = attempts + 1, lease_token = lease_token + 1,"
        " lease_until = now() + make_interval(secs => $1)"
        " WHERE id = (SELECT id FROM jobs WHERE state = 'pending'"
        "   OR (state = 'running' AND lease_until < now())"
        "   ORDER BY id FOR UPDATE SKIP LOCKED LIMIT 1)"
        " RETURNING id, lease_token, attempts, bundle_uri, submitted_by, correlation_id",
        lease_s,
    )
    if row is None:
        return None
    return Job(
        row["id"],
        row["lease_token"],
        row["attempts"],
        row["bundle_uri"],
        row["submitted_by"],
        row["correlation_id"],
    )


async def still_holds(conn: Conn, job: Job) -> bool:
    """Lock the job row and check our claim was not taken over (the fence)."""
    token = await conn.fetchval("SELECT lease_token FROM jobs WHERE id = $1 FOR UPDATE", job.id)
    return bool(token == job.token)


async def reusable_verdict(conn: Conn, digest: str, context: str, max_age_s: float) -> int | None:
    """A recent verdict for byte-identical evidence under the same policy and trust."""
    value = await conn.fetchval(
        "SELECT id FROM verdicts WHERE bundle_digest = $1 AND context_digest = $2"
        " AND reused_from IS NULL AND finished_at > now() - make_interval(secs => $3)"
        " ORDER BY finished_at DESC LIMIT 1",
        digest,
        context,
        max_age_s,
    )
    return int(value) if value is not None else None


async def checks_of(conn: Conn, verdict_id: int) -> list[CheckVerdict]:
    """The checks recorded for a verdict, in order."""
    rows = await conn.fetch(
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


@dataclass(frozen=True, slots=True)
class VerdictRow:
    """What is stored for one verdict."""

    job_id: int
    bundle_digest: str
    context_digest: str
    bundle_uri: str
    submitted_by: str
    bundle_id: str | None
    bundle_version: str | None
    stack_hash: str | None
    accepted: bool
    manifest: object
    read_ms: float
    started_at: datetime
    reused_from: int | None = None


async def save_verdict(conn: Conn, v: VerdictRow, checks: list[CheckVerdict]) -> int:
    """Insert the verdict and its checks; mark the job done. Returns the verdict id."""
    verdict_id: int = await conn.fetchval(
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
    await conn.executemany(
        "INSERT INTO verdict_checks (verdict_id, position, check_name, result, reason, duration_ms)"
        " VALUES ($1, $2, $3, $4, $5, $6)",
        [
            (verdict_id, i, c.check, c.result.value, c.reason, c.duration_ms)
            for i, c in enumerate(checks)
        ],
    )
    await conn.execute(
        "UPDATE jobs SET state = 'done', finished_at = now(), verdict_id = $2 WHERE id = $1",
        v.job_id,
        verdict_id,
    )
    return verdict_id


async def record_pin(conn: Conn, stack_hash: str, site: str, at: datetime) -> None:
    """Remember that a stack is pinned somewhere (for anti-rollback)."""
    await conn.execute(
        "INSERT INTO pinned (stack_hash, site, pinned_at) VALUES ($1, $2, $3)"
        " ON CONFLICT (stack_hash, site) DO UPDATE SET pinned_at = GREATEST(pinned.pinned_at, $3)",
        stack_hash,
        site,
        at,
    )


async def pinned_manifest(conn: Conn, bundle_id: str) -> tuple[str, object] | None:
    """(stack hash, manifest JSON) of the most recently pinned attested bundle of this line."""
    row = await conn.fetchrow(
        "SELECT v.stack_hash, v.manifest FROM pinned p"
        " JOIN verdicts v ON v.stack_hash = p.stack_hash AND v.accepted"
        " WHERE v.bundle_id = $1 ORDER BY p.pinned_at DESC, v.id DESC LIMIT 1",
        bundle_id,
    )
    return None if row is None else (row["stack_hash"], json.loads(row["manifest"]))
