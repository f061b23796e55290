"""Thin handlers: record what arrived; the worker does the long verification."""

from __future__ import annotations

from lockstep_attest.adapters import repository
from lockstep_common.consumer import HandlerContext
from lockstep_common.envelope import Envelope
from lockstep_common.events.v1 import BundleSubmitted, PinChanged


async def bundle_submitted(ctx: HandlerContext, env: Envelope[BundleSubmitted]) -> None:
    """Persist a job and let the message be acknowledged: verification can take minutes."""
    data = env.data
    await repository.add_job(
        ctx.conn, env.event_id, data.bundle_uri, data.submitted_by, env.correlation_id
    )


async def pin_changed(ctx: HandlerContext, env: Envelope[PinChanged]) -> None:
    """Remember pinned stacks: anti-rollback compares new bundles with them."""
    await repository.record_pin(ctx.conn, env.data.stack_hash, env.data.site, env.occurred_at)
