"""Submissions as ``lockstep bundle submit|list|show`` see them (``operator_commands.py``):
a job, and once verified its verdict with every check (migrations/0001_attest.sql).

A submission made over the bus is a job like one from ``bundle.submitted``: its id is the
request's, so a retried request records none twice, and the worker verifies it the same way.
"""

from __future__ import annotations

import uuid

import asyncpg

from lockstep_attest.domain.jobs import INITIAL
from lockstep_common.db import Conn
from lockstep_common.events.v1 import BundleSummary, CheckVerdict
from lockstep_common.vocabulary import CheckResult

# The job, its verdict, and the reason of the verdict's first failed check.
_SUMMARY = (
    "SELECT j.id, j.bundle_uri, j.submitted_by, j.created_at, j.state, v.accepted,"
    " v.bundle_id, v.bundle_version, v.stack_hash, v.id AS verdict_id, r.job_id AS reused_job,"
    " (SELECT c.reason FROM verdict_checks c WHERE c.verdict_id = v.id AND c.result = 'fail'"
    "  ORDER BY c.position LIMIT 1) AS reason"
    " FROM jobs j LEFT JOIN verdicts v ON v.id = j.verdict_id"
    " LEFT JOIN verdicts r ON r.id = v.reused_from"
)


async def add_submission(
    conn: Conn, request_id: uuid.UUID, uri: str, by: str, note: str | None
) -> int:
    """Record a pending job for the bundle at ``uri``; its id."""
    del note  # kept with the request in operator_requests, the audit of who asked what
    job_id: int = await conn.fetchval(
        "INSERT INTO jobs (event_id, bundle_uri, submitted_by, correlation_id, state)"
        " VALUES ($1, $2, $3, $4, $5) RETURNING id",
        request_id,
        uri,
        by,
        str(request_id),
        INITIAL.value,
    )
    return job_id


def _summary(row: asyncpg.Record) -> BundleSummary:
    state = row["state"]
    if row["accepted"] is not None:
        state = "attested" if row["accepted"] else "rejected"
    return BundleSummary(
        job_id=row["id"],
        bundle_uri=row["bundle_uri"],
        submitted_by=row["submitted_by"],
        submitted_at=row["created_at"],
        state=state,
        bundle_id=row["bundle_id"],
        bundle_version=row["bundle_version"],
        stack_hash=row["stack_hash"],
        reason=row["reason"],
    )


async def summaries(conn: Conn, before: int | None, limit: int) -> list[BundleSummary]:
    """Submissions older than job ``before`` (all when None), newest first."""
    rows = await conn.fetch(
        _SUMMARY + " WHERE $1::bigint IS NULL OR j.id < $1 ORDER BY j.id DESC LIMIT $2",
        before,
        limit,
    )
    return [_summary(r) for r in rows]


async def submission(
    conn: Conn, job_id: int
) -> tuple[BundleSummary, list[CheckVerdict], int | None] | None:
    """One submission, its verdict's checks in order, and the job whose verdict it reused."""
    row = await conn.fetchrow(_SUMMARY + " WHERE j.id = $1", job_id)
    if row is None:
        return None
    checks = await conn.fetch(
        "SELECT check_name, result, reason, duration_ms FROM verdict_checks"
        " WHERE verdict_id = $1 ORDER BY position",
        row["verdict_id"],
    )
    return (
        _summary(row),
        [
            CheckVerdict(
                check=c["check_name"],
                result=CheckResult(c["result"]),
                reason=c["reason"],
                duration_ms=c["duration_ms"],
            )
            for c in checks
        ],
        row["reused_job"],
    )
