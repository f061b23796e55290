"""An in-memory ``AttestStore`` for unit tests of handlers and the worker (no PostgreSQL).

It keeps the PostgreSQL store's semantics (adapters/repository.py), which
tests/integration/test_attest_store_contract.py checks against both: one job per event id;
claims take the oldest pending job or one whose lease lapsed, bump the fencing token and count
an attempt; every state change goes through ``domain.jobs.transition``; a transaction's
changes and events commit together when its block ends and vanish if it raises. Its clock
(PostgreSQL's ``now()``) stands still until a test calls :meth:`MemoryStore.advance`, so
leases lapse and reuse windows close without sleeping.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from lockstep_attest.domain.jobs import INITIAL, JobState, transition
from lockstep_attest.store import Job, VerdictRow
from lockstep_common.envelope import source_of
from lockstep_common.events.v1 import CheckVerdict
from lockstep_common.testing import RecordedEvents

START = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class JobRecord:
    """One row of ``attest.jobs``."""

    id: int
    event_id: uuid.UUID
    bundle_uri: str
    submitted_by: str
    correlation_id: str | None
    state: JobState = INITIAL
    attempts: int = 0
    lease_token: int = 0
    lease_until: datetime | None = None
    finished_at: datetime | None = None
    verdict_id: int | None = None


@dataclass(frozen=True, slots=True)
class VerdictRecord:
    """One row of ``attest.verdicts`` with its ``verdict_checks``, in order."""

    id: int
    verdict: VerdictRow
    checks: tuple[CheckVerdict, ...]
    finished_at: datetime


@dataclass(slots=True)
class _Tables:
    # Rows are frozen and replaced on change, so a shallow copy is a snapshot to roll back to.
    jobs: dict[int, JobRecord] = field(default_factory=dict)
    verdicts: dict[int, VerdictRecord] = field(default_factory=dict)
    pinned: dict[tuple[str, str], datetime] = field(default_factory=dict)

    def copy(self) -> _Tables:
        return _Tables(dict(self.jobs), dict(self.verdicts), dict(self.pinned))


class MemoryStore:
    """The attest store in a few dicts; ``events`` holds what committed transactions emitted."""

    def __init__(self, *, source: str = source_of("attest"), now: datetime = START) -> None:
        self.now = now
        self.events = RecordedEvents(source=source)
        self._tables = _Tables()
        self._source = source

    @property
    def jobs(self) -> list[JobRecord]:
        """Every job, in id order."""
        return [self._tables.jobs[i] for i in sorted(self._tables.jobs)]

    @property
    def verdicts(self) -> list[VerdictRecord]:
        """Every verdict, in id order."""
        return [self._tables.verdicts[i] for i in sorted(self._tables.verdicts)]

    def advance(self, seconds: float) -> None:
        """Move the store's clock on (leases lapse, reuse windows close)."""
        self.now += timedelta(seconds=seconds)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[MemoryTx]:
        """Changes and events made through the yielded tx commit when the block ends."""
        before = self._tables.copy()
        tx = MemoryTx(self._tables, RecordedEvents(source=self._source), self.now)
        try:
            yield tx
        except BaseException:
            self._tables = before
            raise
        self.events.emitted.extend(tx.events.emitted)


@dataclass(slots=True)
class MemoryTx:
    """An ``AttestTx`` on the store's tables; ``now`` is fixed for the transaction, as in
    PostgreSQL."""

    tables: _Tables
    events: RecordedEvents
    now: datetime

    async def add_job(
        self, event_id: uuid.UUID, uri: str, by: str, correlation: str | None
    ) -> None:
        """Record a submission (once per event id)."""
        if any(j.event_id == event_id for j in self.tables.jobs.values()):
            return
        job_id = max(self.tables.jobs, default=0) + 1
        self.tables.jobs[job_id] = JobRecord(job_id, event_id, uri, by, correlation)

    async def claim_job(self, lease_s: float) -> Job | None:
        """Claim the oldest pending job, or one whose holder's lease ran out."""
        claimable = [j for _, j in sorted(self.tables.jobs.items()) if self._claimable(j)]
        if not claimable:
            return None
        old = claimable[0]
        row = dataclasses.replace(
            old,
            state=transition(old.state, JobState.RUNNING),
            attempts=old.attempts + 1,
            lease_token=old.lease_token + 1,
            lease_until=self.now + timedelta(seconds=lease_s),
        )
        self.tables.jobs[row.id] = row
        return Job(
            row.id,
            row.lease_token,
            row.attempts,
            row.bundle_uri,
            row.submitted_by,
            row.correlation_id,
        )

    def _claimable(self, job: JobRecord) -> bool:
        lapsed = job.lease_until is not None and job.lease_until < self.now
        return job.state is JobState.PENDING or (job.state is JobState.RUNNING and lapsed)

    async def still_holds(self, job: Job) -> bool:
        """Whether the job's token is still this claim's (the fence)."""
        row = self.tables.jobs.get(job.id)
        return row is not None and row.lease_token == job.token

    async def save_verdict(self, verdict: VerdictRow, checks: list[CheckVerdict]) -> int:
        """Record the verdict and its checks; mark the job done. Returns the verdict id."""
        job = self.tables.jobs[verdict.job_id]
        done = transition(job.state, JobState.DONE)
        verdict_id = max(self.tables.verdicts, default=0) + 1
        self.tables.verdicts[verdict_id] = VerdictRecord(
            verdict_id, verdict, tuple(checks), self.now
        )
        self.tables.jobs[job.id] = dataclasses.replace(
            job, state=done, finished_at=self.now, verdict_id=verdict_id
        )
        return verdict_id

    async def reusable_verdict(self, digest: str, context: str, max_age_s: float) -> int | None:
        """A recent verdict for byte-identical evidence under the same policy and trust."""
        since = self.now - timedelta(seconds=max_age_s)
        found = [
            r
            for r in self.tables.verdicts.values()
            if r.verdict.bundle_digest == digest
            and r.verdict.context_digest == context
            and r.verdict.reused_from is None
            and r.finished_at > since
        ]
        return max(found, key=lambda r: (r.finished_at, r.id)).id if found else None

    async def checks_of(self, verdict_id: int) -> list[CheckVerdict]:
        """The checks recorded for a verdict, in order."""
        record = self.tables.verdicts.get(verdict_id)
        return list(record.checks) if record else []

    async def record_pin(self, stack_hash: str, site: str, at: datetime) -> None:
        """Remember that a stack is pinned somewhere (the latest time wins)."""
        key = (stack_hash, site)
        self.tables.pinned[key] = max(at, self.tables.pinned.get(key, at))

    async def pinned_manifest(self, bundle_id: str) -> tuple[str, object] | None:
        """(stack hash, manifest JSON) of the most recently pinned attested bundle of this line."""
        found = [
            (pinned_at, r.id, r.verdict)
            for (stack_hash, _site), pinned_at in self.tables.pinned.items()
            for r in self.tables.verdicts.values()
            if r.verdict.accepted
            and r.verdict.stack_hash == stack_hash
            and r.verdict.bundle_id == bundle_id
        ]
        if not found:
            return None
        _, _, v = max(found, key=lambda f: (f[0], f[1]))
        assert v.stack_hash is not None  # noqa: S101 - matched a pinned stack hash above
        # jsonb round trip, as PostgreSQL returns it.
        return v.stack_hash, json.loads(json.dumps(v.manifest))
