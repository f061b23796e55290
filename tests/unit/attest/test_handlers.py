"""Attest's handlers on the in-memory store: what a submission and a pin leave behind."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from lockstep_attest.domain.jobs import JobState
from lockstep_attest.handlers import Handlers
from lockstep_attest.store import VerdictRow
from lockstep_attest.testing.memory_store import MemoryStore
from lockstep_common.envelope import Envelope, make_envelope, source_of
from lockstep_common.events.v1 import BundleSubmitted, PinChanged, ScopeSelector

pytestmark = pytest.mark.unit
CLI = source_of("cli")
T0 = datetime(2026, 3, 1, tzinfo=UTC)
STACK = "a" * 64
HANDLERS = Handlers()


def submission(
    uri: str = "file:///bundles/b1", by: str = "ci-job-812"
) -> Envelope[BundleSubmitted]:
    data = BundleSubmitted(bundle_uri=uri, submitted_by=by)
    return make_envelope(data, source=CLI, correlation_id="req-1")


def pin(stack_hash: str, site: str, at: datetime) -> Envelope[PinChanged]:
    data = PinChanged(site=site, scope=ScopeSelector(), stack_hash=stack_hash, stack={})
    return make_envelope(data, source=CLI, occurred_at=at)


async def test_a_submission_becomes_one_pending_job() -> None:
    store = MemoryStore()
    env = submission()
    async with store.transaction() as tx:
        await HANDLERS.bundle_submitted(tx, env, now=T0)
    (job,) = store.jobs
    assert (job.event_id, job.bundle_uri, job.submitted_by, job.correlation_id) == (
        env.event_id,
        "file:///bundles/b1",
        "ci-job-812",
        "req-1",
    )
    assert (job.state, job.attempts, job.lease_token) == (JobState.PENDING, 0, 0)
    assert store.events.emitted == []  # the worker answers, not the handler


async def test_a_redelivered_submission_adds_no_second_job() -> None:
    store = MemoryStore()
    env = submission()
    for _ in range(2):
        async with store.transaction() as tx:
            await HANDLERS.bundle_submitted(tx, env, now=T0)
    assert len(store.jobs) == 1


async def test_two_submissions_of_the_same_bundle_are_two_jobs() -> None:
    store = MemoryStore()
    async with store.transaction() as tx:
        await HANDLERS.bundle_submitted(tx, submission(), now=T0)
        await HANDLERS.bundle_submitted(tx, submission(), now=T0)
    assert [j.bundle_uri for j in store.jobs] == ["file:///bundles/b1"] * 2


async def test_a_pin_makes_its_attested_manifest_the_line_to_compare_with() -> None:
    store = MemoryStore()
    async with store.transaction() as tx:
        await tx.add_job(submission().event_id, "file:///b", "me", None)
        job = await tx.claim_job(30)
        assert job is not None
        await tx.save_verdict(attested(job.id, STACK, {"bundle_id": "line", "v": 1}), [])
        assert await tx.pinned_manifest("line") is None
        await HANDLERS.pin_changed(tx, pin(STACK, "site-a", T0), now=T0)
        assert await tx.pinned_manifest("line") == (STACK, {"bundle_id": "line", "v": 1})


async def test_the_latest_pin_of_a_line_wins_and_a_stale_pin_event_moves_nothing_back() -> None:
    store = MemoryStore()
    old, new = "b" * 64, "c" * 64
    async with store.transaction() as tx:
        for n, stack in enumerate((old, new), start=1):
            await tx.add_job(submission(uri=f"file:///b{n}").event_id, f"file:///b{n}", "me", None)
            job = await tx.claim_job(30)
            assert job is not None
            await tx.save_verdict(attested(job.id, stack, {"bundle_id": "line", "v": n}), [])
        await HANDLERS.pin_changed(tx, pin(old, "site-a", T0), now=T0)
        await HANDLERS.pin_changed(tx, pin(new, "site-a", T0 + timedelta(hours=1)), now=T0)
        assert await tx.pinned_manifest("line") == (new, {"bundle_id": "line", "v": 2})
        # Pinned back to the old stack later on: that is now the line's pin.
        await HANDLERS.pin_changed(tx, pin(old, "site-a", T0 + timedelta(hours=2)), now=T0)
        assert await tx.pinned_manifest("line") == (old, {"bundle_id": "line", "v": 1})
        # A stale copy of the first pin.changed (redelivered late) does not move it back.
        await HANDLERS.pin_changed(tx, pin(old, "site-a", T0), now=T0)
        assert await tx.pinned_manifest("line") == (old, {"bundle_id": "line", "v": 1})


def attested(job_id: int, stack_hash: str, manifest: object) -> VerdictRow:
    return VerdictRow(
        job_id=job_id,
        bundle_digest="d" * 64,
        context_digest="c" * 64,
        bundle_uri="file:///b",
        submitted_by="me",
        bundle_id="line",
        bundle_version="1",
        stack_hash=stack_hash,
        accepted=True,
        manifest=manifest,
        read_ms=1.0,
        started_at=T0,
    )
