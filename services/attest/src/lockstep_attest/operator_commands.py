"""The attest service's operator commands (``lockstep bundle submit|list|show``), answered over
the bus by ``lockstep_common.operator.OperatorResponder`` (``app.py`` adds them): the CLI
reads and writes none of attest's tables.

``bundle.submit`` carries the bundle's path, never its bytes (a NATS message is at most 1 MiB;
a bundle's images are gigabytes): the service reads the bundle from its own bundle roots, as it
does for ``bundle.submitted``, and refuses at once a path it may not read (``BundleSource``).
The submitter recorded is the identity the server authenticated; the reader may not submit.
"""

from __future__ import annotations

import asyncio
from typing import Any

from lockstep_attest.adapters.bundle_source import BundleRefused, BundleSource
from lockstep_attest.adapters.submissions import add_submission, submission, summaries
from lockstep_common.db import Conn
from lockstep_common.events.v1 import (
    BundleListAnswered,
    BundleListRequested,
    BundleShowAnswered,
    BundleShowRequested,
    BundleSubmitAnswered,
    BundleSubmitRequested,
)
from lockstep_common.operator import Asker, Command, Refusal


def commands(bundles: BundleSource) -> tuple[Command[Any], ...]:
    """The commands, reading bundles from ``bundles``' roots."""

    async def bundle_submit(
        conn: Conn, request: BundleSubmitRequested, asker: Asker
    ) -> BundleSubmitAnswered:
        """Record a job for the worker once the service may read the bundle."""
        try:
            # Walks a directory or a tar's members to size it: off the event loop.
            await asyncio.to_thread(bundles.locate, request.bundle_uri)
        except BundleRefused as exc:
            raise Refusal("invalid", f"{request.bundle_uri}: {exc}") from None
        job_id = await add_submission(
            conn, asker.request_id, request.bundle_uri, asker.identity, request.note
        )
        return BundleSubmitAnswered(job_id=job_id, bundle_uri=request.bundle_uri)

    return (
        Command(
            "bundle.submit",
            BundleSubmitRequested,
            BundleSubmitAnswered,
            bundle_submit,
            writes=True,
        ),
        Command("bundle.list", BundleListRequested, BundleListAnswered, bundle_list),
        Command("bundle.show", BundleShowRequested, BundleShowAnswered, bundle_show),
    )


async def bundle_list(conn: Conn, request: BundleListRequested, asker: Asker) -> BundleListAnswered:
    """A page of submissions, newest first."""
    del asker
    page = await summaries(conn, request.before, request.limit + 1)
    more = len(page) > request.limit
    page = page[: request.limit]
    return BundleListAnswered(
        bundles=tuple(page), next_before=page[-1].job_id if more and page else None
    )


async def bundle_show(conn: Conn, request: BundleShowRequested, asker: Asker) -> BundleShowAnswered:
    """The submission with every check of its verdict; ``not_found`` for an unknown id."""
    del asker
    found = await submission(conn, request.job_id)
    if found is None:
        raise Refusal("not_found", f"no bundle submission {request.job_id}")
    summary, checks, reused = found
    return BundleShowAnswered(bundle=summary, checks=tuple(checks), reused_from=reused)
