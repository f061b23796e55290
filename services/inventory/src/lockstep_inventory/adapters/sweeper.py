"""Redfish firmware-inventory sweeps over many BMCs (issue 4).

``async for result in sweep(targets, credentials=...)`` yields one :class:`SweepResult` per
target as each BMC finishes, never holding more than ``concurrency`` finished results that the
consumer has not taken. Per BMC: log in with a session (DSP0266 §13.3 "Session
management": ``POST /redfish/v1/SessionService/Sessions`` -> ``X-Auth-Token`` + ``Location``),
read ServiceRoot, read ``FirmwareInventory`` (one ``$expand=.($levels=1)`` GET when
ServiceRoot's ``ProtocolFeaturesSupported.ExpandQuery`` advertises it, DSP0266 "Query
parameters"; otherwise the collection and each member, at most ``per_bmc`` at once) and
always log out (``DELETE`` the session, DSP0266 §13.3.4), also on errors and cancellation.

A BMC that cannot be read ends as ``SweepResult(readable=False, error=...)``; it is never
skipped. Close the iterator early with ``contextlib.aclosing`` so that open sessions are
deleted promptly. Performance basis: research/perf.md section 5 (aiohttp, one connector).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from dataclasses import dataclass

import aiohttp

from lockstep_inventory.adapters.bmc_reader import BmcReader, BmcTarget, SweepResult
from lockstep_inventory.adapters.credentials import CredentialSource
from lockstep_inventory.adapters.redfish_http import RetryPolicy

__all__ = ["BmcTarget", "SweepOptions", "SweepResult", "sweep"]
log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SweepOptions:
    """Knobs of :func:`sweep` (also its keyword arguments)."""

    concurrency: int = 256
    per_bmc: int = 2
    timeout_s: float = 10.0
    retries: int = 2
    backoff_s: float = 0.5
    verify_tls: bool = True
    use_expand: bool | None = None  # None: when advertised; False: never; True: always
    max_retry_after_s: float = 30.0


async def sweep(
    targets: Sequence[BmcTarget],
    *,
    credentials: CredentialSource,
    concurrency: int = 256,
    per_bmc: int = 2,
    timeout_s: float = 10,
    retries: int = 2,
    backoff_s: float = 0.5,
    verify_tls: bool = True,
    use_expand: bool | None = None,
    max_retry_after_s: float = 30.0,
) -> AsyncGenerator[SweepResult, None]:
    """Read the firmware inventory of every target; results stream in completion order.

    ``timeout_s`` bounds each HTTP attempt; each request is tried ``retries + 1`` times.
    TLS verification is on unless ``verify_tls`` (sweep default) or ``BmcTarget.verify_tls``
    (per BMC) turns it off, which is logged for every BMC concerned.
    """
    options = SweepOptions(
        concurrency,
        per_bmc,
        timeout_s,
        retries,
        backoff_s,
        verify_tls,
        use_expand,
        max_retry_after_s,
    )
    if concurrency < 1 or per_bmc < 1 or retries < 0 or timeout_s <= 0 or backoff_s < 0:
        raise ValueError("concurrency, per_bmc >= 1; retries, backoff_s >= 0; timeout_s > 0")
    async with aclosing(_sweep(targets, credentials, options)) as results:
        async for result in results:
            yield result


async def _sweep(
    targets: Sequence[BmcTarget], credentials: CredentialSource, options: SweepOptions
) -> AsyncGenerator[SweepResult, None]:
    if not targets:
        return
    policy = RetryPolicy(
        options.timeout_s, options.retries, options.backoff_s, options.max_retry_after_s
    )
    # One pool for the whole sweep; TLS verification stays the connector default and is only
    # relaxed per request for a BMC whose setting says so.
    connector = aiohttp.TCPConnector(limit=options.concurrency, limit_per_host=options.per_bmc)
    headers = {"Accept": "application/json", "OData-Version": "4.0"}
    results: asyncio.Queue[SweepResult] = asyncio.Queue(maxsize=options.concurrency)
    pending = iter(targets)
    async with aiohttp.ClientSession(connector=connector, headers=headers) as http:
        reader = BmcReader(
            http,
            credentials,
            policy,
            options.per_bmc,
            options.verify_tls,
            options.use_expand,
            options.concurrency,
        )

        async def worker() -> None:
            for target in pending:  # one shared iterator: each target is taken once
                await results.put(await reader.read(target))

        workers = [
            asyncio.create_task(worker()) for _ in range(min(options.concurrency, len(targets)))
        ]
        try:
            for _ in range(len(targets)):
                yield await results.get()
        finally:
            for task in workers:
                task.cancel()  # readers delete their sessions on the way out
            await asyncio.gather(*workers, return_exceptions=True)
