"""The attest worker on the in-memory store: claim, verify, commit under the fence."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import uuid
from pathlib import Path

import pytest

from lockstep_attest.adapters.bundle_source import BundleSource
from lockstep_attest.domain.jobs import JobState
from lockstep_attest.store import Job
from lockstep_attest.testing.bundles import Kit, make_kit
from lockstep_attest.testing.memory_store import MemoryStore
from lockstep_attest.worker import AttestWorker, Context
from lockstep_attestation.policy import Policy
from lockstep_attestation.trust import TrustStore
from lockstep_attestation.trust_store import load_trust_store
from lockstep_cli.polling import until
from lockstep_common import subjects
from lockstep_common.envelope import source_of
from lockstep_common.events.v1 import BundleAttested, BundleRejected
from lockstep_common.service import Resources
from lockstep_common.transitions import InvalidTransition
from lockstep_common.vocabulary import CheckResult

pytestmark = pytest.mark.unit
LEASE_S = 30.0
REUSE_S = 600.0


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory) -> Kit:
    return make_kit(tmp_path_factory.mktemp("kit"))


@pytest.fixture(scope="module")
def trust(kit: Kit) -> TrustStore:
    return load_trust_store(kit.trust)


def worker(
    trust: TrustStore | None, *, max_attempts: int = 3, lease_s: float = LEASE_S
) -> AttestWorker:
    # pytest's temporary directories, where every bundle of these tests lives.
    bundles = BundleSource.of([Path(tempfile.gettempdir())], 1 << 30)
    ctx = Context(trust, "trust-digest", Policy(), (), source_of("attest"), bundles)
    return AttestWorker(
        ctx,
        store=unbuilt,
        poll_s=0.05,
        lease_s=lease_s,
        max_attempts=max_attempts,
        reuse_s=REUSE_S,
    )


def unbuilt(_: Resources) -> MemoryStore:
    # These tests hand ``step`` and ``process`` their store; only ``run`` builds one.
    raise AssertionError("run() is not used here")


async def submit(store: MemoryStore, bundle: Path | str, correlation: str = "req-1") -> None:
    uri = bundle.as_uri() if isinstance(bundle, Path) else bundle
    async with store.transaction() as tx:
        await tx.add_job(uuid.uuid4(), uri, "ci-job-812", correlation)


async def claim(store: MemoryStore) -> Job:
    async with store.transaction() as tx:
        job = await tx.claim_job(LEASE_S)
    assert job is not None
    return job


def rejected(store: MemoryStore) -> BundleRejected:
    ((subject, env),) = store.events.emitted
    assert subject == subjects.bundle_rejected()
    assert isinstance(env.data, BundleRejected)
    return env.data


def failed(event: BundleRejected) -> dict[str, str]:
    return {c.check: c.reason for c in event.checks if c.result is CheckResult.FAIL}


async def test_a_job_is_claimed_verified_and_committed_with_its_event(
    kit: Kit, trust: TrustStore
) -> None:
    store = MemoryStore()
    await submit(store, kit.bundle)
    assert await worker(trust).step(store) is True
    (job,) = store.jobs
    (record,) = store.verdicts
    assert (job.state, job.verdict_id, job.attempts) == (JobState.DONE, record.id, 1)
    v = record.verdict
    assert v.accepted and v.submitted_by == "ci-job-812" and v.reused_from is None
    assert v.stack_hash == kit.manifest.stack_hash() and v.bundle_id == kit.manifest.bundle_id
    assert {c.check for c in record.checks} >= {"signature", "digest", "pldm", "rim", "safe"}
    ((subject, env),) = store.events.emitted
    assert subject == subjects.bundle_attested()
    assert env.correlation_id == "req-1" and env.source == source_of("attest")
    assert isinstance(env.data, BundleAttested)
    assert env.data.stack_hash == kit.manifest.stack_hash()
    assert env.data.checks == record.checks
    # Nothing left to do.
    assert await worker(trust).step(store) is False


async def test_a_tampered_bundle_is_rejected_naming_the_check(
    kit: Kit, trust: TrustStore, tmp_path: Path
) -> None:
    tampered = tmp_path / "tampered"
    shutil.copytree(kit.bundle, tampered)
    image = tampered / "images" / "psu.bin"
    raw = bytearray(image.read_bytes())
    raw[100] ^= 0x01
    image.write_bytes(bytes(raw))
    store = MemoryStore()
    await submit(store, tampered)
    await worker(trust).step(store)
    event = rejected(store)
    assert event.bundle_uri == tampered.as_uri() and event.bundle_id == kit.manifest.bundle_id
    assert "digest" in failed(event)
    assert not store.verdicts[0].verdict.accepted


@pytest.mark.parametrize(
    ("uri", "reason"),
    [
        ("file:///nonexistent/bundle", "/nonexistent/bundle"),
        ("s3://bucket/bundle.tar", "unsupported bundle URI scheme 's3'"),
    ],
)
async def test_an_unreadable_bundle_is_rejected_with_why(
    trust: TrustStore, uri: str, reason: str
) -> None:
    store = MemoryStore()
    await submit(store, uri)
    await worker(trust).step(store)
    assert reason in failed(rejected(store))["read"]
    assert store.jobs[0].state is JobState.DONE


async def test_without_a_trust_store_every_bundle_is_rejected(kit: Kit) -> None:
    store = MemoryStore()
    await submit(store, kit.bundle)
    await worker(None).step(store)
    event = rejected(store)
    assert failed(event) == {"trust_store": "no trust store configured: attest fails closed"}
    assert len(event.checks) == 1


async def test_a_superseded_workers_result_is_discarded_by_the_fence(
    kit: Kit, trust: TrustStore, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryStore()
    await submit(store, kit.bundle)
    paused = await claim(store)
    store.advance(LEASE_S + 1)  # its holder stalls past the lease
    successor = await claim(store)
    assert (successor.id, successor.token, successor.attempts) == (paused.id, paused.token + 1, 2)
    # The paused holder wakes up and finishes: the fence refuses its commit.
    await worker(trust).process(store, paused)
    assert store.verdicts == [] and store.events.emitted == []
    assert [j.state for j in store.jobs] == [JobState.RUNNING]
    assert f"attest job {paused.id} was taken over" in caplog.text
    await worker(trust).process(store, successor)
    assert len(store.verdicts) == 1 and store.jobs[0].state is JobState.DONE
    assert len(store.events.emitted) == 1


async def test_a_running_job_is_not_claimed_again_before_its_lease_lapses(kit: Kit) -> None:
    store = MemoryStore()
    await submit(store, kit.bundle)
    await claim(store)
    store.advance(LEASE_S)  # the lease ends now: not yet lapsed
    async with store.transaction() as tx:
        assert await tx.claim_job(LEASE_S) is None


async def test_a_job_that_keeps_losing_its_holder_is_rejected_after_max_attempts(
    kit: Kit, trust: TrustStore
) -> None:
    store = MemoryStore()
    await submit(store, kit.bundle)
    for _ in range(2):  # two holders die mid-job
        await claim(store)
        store.advance(LEASE_S + 1)
    await worker(trust, max_attempts=2).step(store)
    assert failed(rejected(store)) == {"job": "verification did not complete in 2 attempts"}
    assert store.jobs[0].attempts == 3 and store.jobs[0].state is JobState.DONE


async def test_identical_bytes_reuse_a_recent_verdict_until_the_window_closes(
    kit: Kit, trust: TrustStore
) -> None:
    store = MemoryStore()
    w = worker(trust)
    for _ in range(2):
        await submit(store, kit.bundle)
        await w.step(store)
    first, second = store.verdicts
    assert second.verdict.reused_from == first.id and second.verdict.accepted
    assert second.checks == first.checks
    assert [type(e) for e in store.events.events] == [BundleAttested, BundleAttested]
    store.advance(REUSE_S + 1)
    await submit(store, kit.bundle)
    await w.step(store)
    assert store.verdicts[2].verdict.reused_from is None


async def test_a_job_cannot_be_finished_twice(kit: Kit, trust: TrustStore) -> None:
    store = MemoryStore()
    await submit(store, kit.bundle)
    job = await claim(store)
    await worker(trust).process(store, job)
    # Same holder, same token, second commit: the transition table refuses done -> done, and the
    # transaction (and its event) rolls back.
    with pytest.raises(InvalidTransition, match="from done to done"):
        await worker(trust).process(store, job)
    assert len(store.verdicts) == 1 and len(store.events.emitted) == 1


async def test_a_job_held_past_its_lease_makes_the_worker_not_on_time(
    kit: Kit, trust: TrustStore
) -> None:
    w = worker(trust, lease_s=0.001)  # any job in hand outlives so short a lease
    assert w.on_time() and w.job_age_s() == 0.0
    store = MemoryStore()
    await submit(store, kit.bundle)
    entered, release = asyncio.Event(), asyncio.Event()
    original = w.process

    async def stuck(store_: MemoryStore, job: Job) -> None:  # a read that never returns
        entered.set()
        await release.wait()
        await original(store_, job)

    w.process = stuck  # type: ignore[method-assign,assignment]
    step = asyncio.create_task(w.step(store))
    await entered.wait()
    await until(lambda: _late(w), "the job in hand to outlive its lease")
    release.set()
    assert await step
    assert w.on_time() and w.job_age_s() == 0.0


async def _late(w: AttestWorker) -> bool:
    return not w.on_time() and w.job_age_s() > 0
