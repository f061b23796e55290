"""Thin handlers: record what arrived; the worker does the long verification.

Each is a ``lockstep_common.stores.Handler``: ``(tx, env, *, now)`` on the store's unit of work
(``store.AttestTx``) rather than the consumer runtime's context, so unit tests run it on the
in-memory store; ``router.py`` joins it to the runtime's transaction (``repository.joined``).
"""

from __future__ import annotations

from datetime import datetime

from lockstep_attest.store import AttestTx
from lockstep_common.envelope import Envelope
from lockstep_common.events.v1 import BundleSubmitted, PinChanged


class Handlers:
    """The attest service's handlers (it binds no configuration: the worker judges)."""

    async def bundle_submitted(
        self, tx: AttestTx, env: Envelope[BundleSubmitted], *, now: datetime
    ) -> None:
        """Persist a job and let the message be acknowledged: verification can take minutes."""
        data = env.data
        await tx.add_job(env.event_id, data.bundle_uri, data.submitted_by, env.correlation_id)

    async def pin_changed(self, tx: AttestTx, env: Envelope[PinChanged], *, now: datetime) -> None:
        """Remember pinned stacks: anti-rollback compares new bundles with them (ordered by
        when the pin was made, ``occurred_at``, not by when it arrived: ``now``)."""
        await tx.record_pin(env.data.stack_hash, env.data.site, env.occurred_at)
