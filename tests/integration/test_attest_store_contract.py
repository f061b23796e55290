"""One set of behavioural assertions, run on both attest stores: PostgreSQL (the service's) and
the in-memory one the unit tests use. A fake that drifts from the real store fails here."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from lockstep_attest.adapters.repository import _CLAIMABLE, PostgresStore
from lockstep_attest.domain.jobs import JobState
from lockstep_attest.store import AttestStore, Job, VerdictRow
from lockstep_attest.testing.memory_store import MemoryStore
from lockstep_common import db, subjects
from lockstep_common.envelope import source_of
from lockstep_common.events.v1 import BundleRejected, CheckVerdict
from lockstep_common.transitions import InvalidTransition
from lockstep_common.vocabulary import CheckResult

pytestmark = pytest.mark.integration
T0 = datetime(2026, 3, 1, tzinfo=UTC)
# A lease that has already ended when it is granted: lapsed for the next claim, on either
# store's clock, without waiting.
LAPSED = -1.0


@dataclass(frozen=True)
class Backend:
    store: AttestStore
    committed_subjects: Callable[[], Awaitable[list[str]]]


@pytest.fixture(params=["memory", "postgres"])
async def backend(
    request: pytest.FixtureRequest, servers: Any, namespace: str
) -> AsyncIterator[Backend]:
    if request.param == "memory":
        memory = MemoryStore()

        async def recorded() -> list[str]:
            return [subject for subject, _ in memory.events.emitted]

        yield Backend(memory, recorded)
        return
    pool = await migrated_pool(servers, namespace)

    async def outbox() -> list[str]:
        return [r["subject"] for r in await pool.fetch("SELECT subject FROM outbox ORDER BY id")]

    try:
        yield Backend(PostgresStore(pool, source_of("attest")), outbox)
    finally:
        await pool.close()


async def migrated_pool(servers: Any, namespace: str) -> asyncpg.Pool:
    schema = f"{namespace}_attest"
    conn = await asyncpg.connect(servers.database_url)
    try:
        attest = db.load_migrations("attest", "lockstep_attest.migrations")
        await db.migrate(conn, schema, db.messaging_migrations() + attest)
    finally:
        await conn.close()
    return await db.create_pool(
        servers.database_url, schema, min_size=1, max_size=2, application_name="contract"
    )


async def add(store: AttestStore, uri: str, event_id: uuid.UUID | None = None) -> None:
    async with store.transaction() as tx:
        await tx.add_job(event_id or uuid.uuid4(), uri, "me", "req-1")


async def claim(store: AttestStore, lease_s: float = 60.0) -> Job | None:
    async with store.transaction() as tx:
        return await tx.claim_job(lease_s)


async def claimed(store: AttestStore, lease_s: float = 60.0) -> Job:
    job = await claim(store, lease_s)
    assert job is not None
    return job


def verdict(
    job: Job,
    *,
    digest: str = "d1",
    stack: str | None = None,
    accepted: bool = True,
    manifest: object = None,
    reused_from: int | None = None,
) -> VerdictRow:
    return VerdictRow(
        job_id=job.id,
        bundle_digest=digest,
        context_digest="ctx",
        bundle_uri=job.bundle_uri,
        submitted_by=job.submitted_by,
        bundle_id="line" if stack else None,
        bundle_version="1" if stack else None,
        stack_hash=stack,
        accepted=accepted,
        manifest=manifest,
        read_ms=1.5,
        started_at=T0,
        reused_from=reused_from,
    )


async def finish(store: AttestStore, row: VerdictRow, checks: list[CheckVerdict]) -> int:
    async with store.transaction() as tx:
        return await tx.save_verdict(row, checks)


async def finished(store: AttestStore, uri: str, **fields: Any) -> tuple[Job, int]:
    await add(store, uri)
    job = await claimed(store)
    return job, await finish(store, verdict(job, **fields), [])


def check(name: str, result: CheckResult) -> CheckVerdict:
    return CheckVerdict(check=name, result=result, reason=f"{name} said so", duration_ms=0.25)


async def test_one_job_per_event_id(backend: Backend) -> None:
    event_id = uuid.uuid4()
    await add(backend.store, "file:///a", event_id)
    await add(backend.store, "file:///a-again", event_id)
    job = await claimed(backend.store)
    assert (job.bundle_uri, job.submitted_by, job.correlation_id) == ("file:///a", "me", "req-1")
    assert await claim(backend.store) is None


async def test_claims_take_the_oldest_pending_job_first(backend: Backend) -> None:
    for uri in ("file:///1", "file:///2", "file:///3"):
        await add(backend.store, uri)
    jobs = [await claimed(backend.store) for _ in range(3)]
    assert [j.bundle_uri for j in jobs] == ["file:///1", "file:///2", "file:///3"]
    assert [(j.token, j.attempts) for j in jobs] == [(1, 1)] * 3
    assert await claim(backend.store) is None


async def test_a_lapsed_lease_is_reclaimed_with_the_next_token_and_fences_the_old(
    backend: Backend,
) -> None:
    await add(backend.store, "file:///a")
    first = await claimed(backend.store, LAPSED)
    second = await claimed(backend.store)
    assert (second.id, second.token, second.attempts) == (first.id, first.token + 1, 2)
    assert await claim(backend.store) is None  # the live lease is respected
    async with backend.store.transaction() as tx:
        assert await tx.still_holds(second)
        assert not await tx.still_holds(first)


async def test_a_verdict_keeps_its_checks_in_order_and_finishes_the_job(backend: Backend) -> None:
    await add(backend.store, "file:///a")
    job = await claimed(backend.store, LAPSED)
    checks = [check("signature", CheckResult.PASS), check("digest", CheckResult.FAIL)]
    verdict_id = await finish(backend.store, verdict(job, accepted=False), checks)
    async with backend.store.transaction() as tx:
        assert await tx.checks_of(verdict_id) == checks
        assert await tx.checks_of(verdict_id + 1000) == []
        # Finished: not claimable even though its lease lapsed, and held by nobody new.
        assert await tx.claim_job(60.0) is None
        assert await tx.still_holds(job)


async def test_only_a_running_job_can_be_finished_and_a_refusal_rolls_back(
    backend: Backend,
) -> None:
    await add(backend.store, "file:///a")
    pending = Job(1, 0, 0, "file:///a", "me", None)
    with pytest.raises(InvalidTransition, match="from pending to done"):
        await finish(backend.store, verdict(pending, digest="never"), [])
    job = await claimed(backend.store)
    assert job.id == pending.id
    await finish(backend.store, verdict(job), [])
    with pytest.raises(InvalidTransition, match="from done to done"):
        await finish(backend.store, verdict(job, digest="twice"), [])
    async with backend.store.transaction() as tx:
        assert await tx.reusable_verdict("never", "ctx", 60.0) is None
        assert await tx.reusable_verdict("twice", "ctx", 60.0) is None


async def test_a_recent_verdict_is_reused_only_for_the_same_digest_and_context(
    backend: Backend,
) -> None:
    _, first = await finished(backend.store, "file:///a", digest="d1")
    _, newer = await finished(backend.store, "file:///b", digest="d1")
    await finished(backend.store, "file:///c", digest="d2", reused_from=first)
    async with backend.store.transaction() as tx:
        assert await tx.reusable_verdict("d1", "ctx", 60.0) == newer
        assert await tx.reusable_verdict("d1", "other-ctx", 60.0) is None
        assert await tx.reusable_verdict("d1", "ctx", 0.0) is None  # the window has closed
        # A reuse is never itself reused: d2's only verdict points at d1's.
        assert await tx.reusable_verdict("d2", "ctx", 60.0) is None


async def test_the_latest_pinned_attested_manifest_of_a_line_is_the_one_to_compare_with(
    backend: Backend,
) -> None:
    await finished(backend.store, "file:///a", stack="s1", manifest={"v": [1, "x"]})
    await finished(backend.store, "file:///b", stack="s2", manifest={"v": [2]})
    await finished(backend.store, "file:///c", stack="s3", manifest={"v": [3]}, accepted=False)
    async with backend.store.transaction() as tx:
        assert await tx.pinned_manifest("line") is None
        await tx.record_pin("s3", "site-a", T0 + timedelta(hours=9))  # a rejected stack: ignored
        assert await tx.pinned_manifest("line") is None
        await tx.record_pin("s1", "site-a", T0)
        await tx.record_pin("s2", "site-b", T0 + timedelta(hours=1))
        assert await tx.pinned_manifest("line") == ("s2", {"v": [2]})
        await tx.record_pin("s1", "site-a", T0 + timedelta(hours=2))
        assert await tx.pinned_manifest("line") == ("s1", {"v": [1, "x"]})
        await tx.record_pin("s1", "site-a", T0)  # a stale pin moves nothing back
        assert await tx.pinned_manifest("line") == ("s1", {"v": [1, "x"]})
        assert await tx.pinned_manifest("other-line") is None


async def test_changes_and_events_commit_together_or_not_at_all(backend: Backend) -> None:
    event = BundleRejected(bundle_uri="file:///a", checks=())
    with pytest.raises(RuntimeError, match="boom"):
        async with backend.store.transaction() as tx:
            await tx.add_job(uuid.uuid4(), "file:///a", "me", None)
            tx.events.emit(subjects.bundle_rejected(), event)
            raise RuntimeError("boom")
    assert await claim(backend.store) is None
    assert await backend.committed_subjects() == []
    async with backend.store.transaction() as tx:
        await tx.add_job(uuid.uuid4(), "file:///a", "me", None)
        tx.events.emit(subjects.bundle_rejected(), event)
    assert await claim(backend.store) is not None
    assert await backend.committed_subjects() == [subjects.bundle_rejected()]


async def test_a_claim_finds_open_jobs_through_their_index_as_a_generic_plan_too(
    servers: Any, namespace: str
) -> None:
    # PostgreSQL only: the claim must not walk every finished job (see repository._CLAIMABLE).
    pool = await migrated_pool(servers, namespace)
    try:
        async with pool.acquire() as conn:
            await conn.execute(
                "INSERT INTO jobs (event_id, bundle_uri, submitted_by, state)"
                " SELECT gen_random_uuid(), 'file:///old', 'me', $1 FROM generate_series(1, 5000)",
                JobState.DONE.value,
            )
            await conn.execute("ANALYZE jobs")
            await conn.execute("SET plan_cache_mode = force_generic_plan")
            plan = "\n".join(r[0] for r in await conn.fetch(f"EXPLAIN {_CLAIMABLE}"))
        assert "jobs_open" in plan, plan
    finally:
        await pool.close()
