"""Runs attestation jobs from the database, one at a time, under a fenced lease.

The ``bundle.submitted`` handler only records a job, so no JetStream message is held while a
multi-gigabyte bundle is hashed (design.md, reliability rule 3). This loop claims jobs
(``FOR UPDATE SKIP LOCKED``; a crashed holder's job is re-claimed when its lease lapses),
verifies in a worker thread, and commits the verdict, its checks and the resulting
``bundle.attested`` / ``bundle.rejected`` event in one transaction, only if its lease token
is still the job's (the fence against a paused, superseded worker). It reaches its state only
through an ``AttestStore`` (store.py) that ``app.py`` builds (``store``, a factory: the pool
exists only once the service has started): PostgreSQL in the service, the in-memory store in
unit tests.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from lockstep_attest.adapters.bundle_source import BundleRefused, BundleSource
from lockstep_attest.store import AttestStore, Job, VerdictRow
from lockstep_attestation.bundle_reader import BundleReadError, load_bundle
from lockstep_attestation.evidence import LoadedBundle
from lockstep_attestation.policy import Policy
from lockstep_attestation.trust import TrustStore
from lockstep_attestation.verification import judge, needs_sha512
from lockstep_common import subjects
from lockstep_common.bundle import Manifest
from lockstep_common.clock import SYSTEM_CLOCK, Clock
from lockstep_common.events.v1 import (
    AttestedComponent,
    BundleAttested,
    BundleRejected,
    CheckVerdict,
)
from lockstep_common.periodic import Every
from lockstep_common.service import Resources
from lockstep_common.vocabulary import CheckResult, clip_text

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Context:
    """What verification depends on besides the bundle."""

    # None is a configuration, not a missing argument: a service started without a trust store
    # runs, and rejects every bundle with a reason (fails closed) instead of refusing to start.
    trust: TrustStore | None
    trust_digest: str
    policy: Policy
    approvals: tuple[bytes, ...]
    source: str
    bundles: BundleSource


def attested_components(manifest: Manifest) -> tuple[AttestedComponent, ...]:
    """Every image of an attested manifest, for bundle.attested: what the planner orders and
    the updater fetches and re-hashes (docs/bundles.md)."""
    return tuple(
        AttestedComponent(
            profile=profile,
            component=component,
            version=entry.version,
            image=entry.image,
            sha384=entry.sha384,
            size=entry.size,
            banks=entry.banks.value,
            activation=entry.activation,
            lowest_supported_version=entry.lowest_supported_version,
        )
        for profile, components in sorted(manifest.profiles.items())
        for component, entry in sorted(components.items())
    )


def _failure(check: str, reason: str) -> CheckVerdict:
    return CheckVerdict(
        check=check, result=CheckResult.FAIL, reason=clip_text(reason), duration_ms=0.0
    )


class AttestWorker:
    """The job loop (a ``lockstep_common.service.Worker``)."""

    def __init__(
        self,
        ctx: Context,
        *,
        store: Callable[[Resources], AttestStore],
        poll_s: float,
        lease_s: float,
        max_attempts: int,
        reuse_s: float,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.ctx = ctx
        self._store = store
        self._clock = clock
        self._poll_s, self._lease_s = poll_s, lease_s
        self._max_attempts, self._reuse_s = max_attempts, reuse_s
        self._busy_since: float | None = None  # clock.monotonic() when the job in hand began

    def job_age_s(self) -> float:
        """How long the job in hand has been verified so far (0 when idle)."""
        return 0.0 if self._busy_since is None else self._clock.monotonic() - self._busy_since

    def on_time(self) -> bool:
        """False while a job is held past its lease: stuck (a read that never returns), and
        another replica may already have re-claimed it."""
        return self.job_age_s() <= self._lease_s

    async def run(self, resources: Resources, stopping: asyncio.Event) -> None:
        """Claim and verify until stopped."""
        store = self._store(resources)
        await Every(self._poll_s, what="attest job loop").run(lambda: self.step(store), stopping)

    async def step(self, store: AttestStore) -> bool:
        """Claim one job and see it through; False when there was none to claim."""
        async with store.transaction() as tx:
            job = await tx.claim_job(self._lease_s)
        if job is None:
            return False
        self._busy_since = self._clock.monotonic()
        try:
            await self.process(store, job)
        finally:
            self._busy_since = None
        return True

    async def process(self, store: AttestStore, job: Job) -> None:
        """Verify one claimed job and commit its verdict, if we still hold it."""
        started = self._clock.now()
        bundle: LoadedBundle | None = None
        checks: list[CheckVerdict]
        reused: int | None = None
        context = ""
        read_ms = 0.0
        if job.attempts > self._max_attempts:
            checks = [
                _failure("job", f"verification did not complete in {self._max_attempts} attempts")
            ]
        elif (trust := self.ctx.trust) is None:
            checks = [_failure("trust_store", "no trust store configured: attest fails closed")]
        else:
            t0 = time.perf_counter()
            try:
                # Both walk and read files, a whole tree or tar: off the event loop.
                bundle = await asyncio.to_thread(self._locate_and_load, job.bundle_uri, trust)
            except (BundleRefused, BundleReadError, OSError, ValueError) as exc:
                checks = [_failure("read", f"{job.bundle_uri}: {exc}")]
            else:
                read_ms = (time.perf_counter() - t0) * 1000
                checks, reused, context = await self._judge(store, bundle, trust, started)
        await self._commit(store, job, bundle, checks, reused, context, started, read_ms)

    def _locate_and_load(self, uri: str, trust: TrustStore) -> LoadedBundle:
        path = self.ctx.bundles.locate(uri)
        return load_bundle(path, sha512_needed=lambda m, docs: needs_sha512(m, docs, trust))

    async def _judge(
        self, store: AttestStore, bundle: LoadedBundle, trust: TrustStore, started: datetime
    ) -> tuple[list[CheckVerdict], int | None, str]:
        pinned: Manifest | None = None
        pinned_hash = ""
        async with store.transaction() as tx:
            if bundle.manifest is not None:
                found = await tx.pinned_manifest(bundle.manifest.bundle_id)
                if found:
                    pinned_hash, pinned_json = found
                    pinned = Manifest.model_validate(pinned_json, strict=False)
            context = hashlib.sha256(
                f"{self.ctx.trust_digest}|{self.ctx.policy.model_dump_json()}|{pinned_hash}".encode()
            ).hexdigest()
            reuse = await tx.reusable_verdict(bundle.digest, context, self._reuse_s)
            if reuse is not None:
                return await tx.checks_of(reuse), reuse, context
        verdict = await asyncio.to_thread(
            judge,
            bundle,
            trust,
            self.ctx.policy,
            now=started,
            pinned=pinned,
            approvals=self.ctx.approvals,
        )
        return list(verdict.checks), None, context

    async def _commit(
        self,
        store: AttestStore,
        job: Job,
        bundle: LoadedBundle | None,
        checks: list[CheckVerdict],
        reused: int | None,
        context: str,
        started: datetime,
        read_ms: float,
    ) -> None:
        manifest = bundle.manifest if bundle else None
        accepted = bool(checks) and all(c.result is CheckResult.PASS for c in checks)
        row = VerdictRow(
            job_id=job.id,
            bundle_digest=bundle.digest if bundle else "",
            context_digest=context,
            bundle_uri=job.bundle_uri,
            submitted_by=job.submitted_by,
            bundle_id=manifest.bundle_id if manifest else None,
            bundle_version=manifest.bundle_version if manifest else None,
            stack_hash=manifest.stack_hash() if manifest else None,
            accepted=accepted,
            manifest=bundle.manifest_json if manifest and bundle else None,
            read_ms=round(read_ms, 3),
            started_at=started,
            reused_from=reused,
        )
        if accepted and manifest:
            data: BundleAttested | BundleRejected = BundleAttested(
                bundle_id=manifest.bundle_id,
                bundle_version=manifest.bundle_version,
                stack_hash=manifest.stack_hash(),
                checks=tuple(checks),
                bundle_uri=job.bundle_uri,
                components=attested_components(manifest),
            )
            subject = subjects.bundle_attested()
        else:
            data = BundleRejected(
                bundle_uri=job.bundle_uri,
                bundle_id=manifest.bundle_id if manifest else None,
                checks=tuple(checks),
            )
            subject = subjects.bundle_rejected()
        async with store.transaction() as tx:
            if not await tx.still_holds(job):
                log.warning("attest job %d was taken over; discarding this result", job.id)
                return
            await tx.save_verdict(row, checks)
            tx.events.emit(subject, data, correlation_id=job.correlation_id)
        log.info(
            "attest job %d: %s %s", job.id, "attested" if accepted else "rejected", job.bundle_uri
        )
