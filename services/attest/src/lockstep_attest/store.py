"""What the attest service keeps, behind a small interface: jobs, verdicts and pinned stacks.

Handlers and the worker speak to an :class:`AttestStore` only. PostgreSQL implements it in
``adapters/repository.py``; ``testing/memory_store.py`` is an in-memory one with the same
semantics, so handler and worker logic is unit-tested without a database, and
``tests/integration/test_attest_store_contract.py`` runs the same assertions on both.
"""

from __future__ import annotations

import uuid
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from lockstep_common.events.v1 import CheckVerdict
from lockstep_common.outbox import EventSink


@dataclass(frozen=True, slots=True)
class Job:
    """A claimed job and the fencing token of this claim."""

    id: int
    token: int
    attempts: int
    bundle_uri: str
    submitted_by: str
    correlation_id: str | None


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


class AttestTx(Protocol):
    """One transaction on the store: everything done through it, and every event emitted to
    ``events``, commits together or not at all."""

    @property
    def events(self) -> EventSink:
        """Where events that must commit with this transaction's changes go."""
        ...

    async def add_job(
        self, event_id: uuid.UUID, uri: str, by: str, correlation: str | None
    ) -> None:
        """Record a submission as a pending job (once per event id: a redelivery adds none)."""
        ...

    async def claim_job(self, lease_s: float) -> Job | None:
        """Claim the oldest pending job, or one whose holder's lease ran out (level-triggered):
        ``running`` with the next fencing token, one more attempt, a lease of ``lease_s``."""
        ...

    async def still_holds(self, job: Job) -> bool:
        """Lock the job and check this claim was not taken over (the fence)."""
        ...

    async def save_verdict(self, verdict: VerdictRow, checks: list[CheckVerdict]) -> int:
        """Record the verdict and its checks, in order, and finish the job; returns the verdict
        id. Raises ``domain.jobs.InvalidTransition`` if the job is not running."""
        ...

    async def reusable_verdict(self, digest: str, context: str, max_age_s: float) -> int | None:
        """The newest verdict, finished less than ``max_age_s`` ago, for byte-identical evidence
        under the same policy, trust and pin (never one that was itself a reuse)."""
        ...

    async def checks_of(self, verdict_id: int) -> list[CheckVerdict]:
        """The checks recorded for a verdict, in order."""
        ...

    async def record_pin(self, stack_hash: str, site: str, at: datetime) -> None:
        """Remember that a stack is pinned at a site (the latest time wins), for anti-rollback."""
        ...

    async def pinned_manifest(self, bundle_id: str) -> tuple[str, object] | None:
        """(stack hash, manifest JSON) of the most recently pinned attested bundle of this
        line, or None when none of its stacks is pinned."""
        ...


class AttestStore(Protocol):
    """Opens units of work on the attest service's state."""

    def transaction(self) -> AbstractAsyncContextManager[AttestTx]:
        """A transaction that commits when the block ends normally and vanishes if it raises."""
        ...
