"""Composition root of the attest service: the only place its dependencies are built."""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

from prometheus_client import Gauge

from lockstep_attest.adapters.bundle_source import BundleSource
from lockstep_attest.adapters.repository import PostgresStore
from lockstep_attest.handlers import Handlers
from lockstep_attest.operator_commands import commands
from lockstep_attest.router import subscriptions
from lockstep_attest.settings import Settings
from lockstep_attest.worker import AttestWorker, Context
from lockstep_attestation.policy import Policy
from lockstep_attestation.trust_store import TrustStoreError, load_trust_store
from lockstep_common.envelope import source_of
from lockstep_common.errors import ConfigurationError
from lockstep_common.service import ServiceApp

NAME = "attest"
log = logging.getLogger(__name__)


def directory_digest(root: Path) -> str:
    """SHA-256 over every file's path and content below ``root``: changes with any byte."""
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(path.relative_to(root).as_posix().encode() + b"\0")
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def load_context(settings: Settings, source: str) -> Context:
    """Trust store, policy and bundle roots from settings; a broken one refuses to start
    (exit 3)."""
    bundles = BundleSource.of(settings.bundle_roots, settings.max_bundle_bytes)
    if not bundles.roots:
        log.warning(
            "attest: no bundle roots configured, so every bundle will be rejected: set "
            "LOCKSTEP_ATTEST_BUNDLE_ROOTS to the directories bundles are read from"
        )
    policy: Policy = Policy()
    approvals: tuple[bytes, ...] = ()
    if settings.policy_file is not None:
        try:
            policy = Policy.model_validate_json(settings.policy_file.read_bytes())
            base = settings.policy_file.parent
            approvals = tuple((base / p).read_bytes() for p in policy.rollback_approvals)
        except (OSError, ValueError) as exc:
            raise ConfigurationError(f"policy {settings.policy_file}: {exc}") from None
    if settings.trust_store is None:
        log.warning(
            "attest: no trust store configured, so every bundle will be rejected: set "
            "LOCKSTEP_ATTEST_TRUST_STORE to a trust store directory (docs/bundles.md)"
        )
        return Context(None, "", policy, approvals, source, bundles)
    try:
        trust = load_trust_store(settings.trust_store)
    except TrustStoreError as exc:
        raise ConfigurationError(str(exc)) from None
    return Context(
        trust, directory_digest(settings.trust_store), policy, approvals, source, bundles
    )


def create_app(settings: Settings) -> ServiceApp:
    """Build the service; nothing connects until ``start()`` (the trust store is read here).

    ``settings`` is required: ``__main__`` reads them from the environment (``run_service``),
    tests build them, and nothing here falls back to reading the environment behind a caller.
    """
    ctx = load_context(settings, source_of(NAME))
    worker = AttestWorker(
        ctx,
        store=lambda resources: PostgresStore(resources.pool, ctx.source),
        poll_s=settings.worker_poll_s,
        lease_s=settings.lease_s,
        max_attempts=settings.max_attempts,
        reuse_s=settings.verdict_reuse_s,
    )
    app = ServiceApp(
        NAME,
        settings,
        subscriptions=subscriptions(Handlers()),
        migration_package="lockstep_attest.migrations",
        workers=[worker],
    )
    app.add_operator_commands(*commands(ctx.bundles))
    app.add_check("worker", worker.on_time)
    Gauge(
        "lockstep_attest_job_age_seconds",
        "How long the job in hand has been verified so far (0 when idle)",
        registry=app.metrics.registry,
    ).set_function(worker.job_age_s)
    return app
