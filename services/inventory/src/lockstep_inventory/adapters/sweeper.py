"""Redfish firmware-inventory sweeps over many BMCs (issue 4).

``async for result in sweep(targets, credentials=..., options=SweepOptions(...))`` yields one
:class:`SweepResult` per target as each BMC finishes: at most ``concurrency`` BMCs are being
read at once and at most ``2 * concurrency`` have been started but not yet taken by the
consumer. Per BMC: log in with a session (DSP0266 §13.3 "Session management":
``POST /redfish/v1/SessionService/Sessions`` -> ``X-Auth-Token`` + ``Location``), read
ServiceRoot, read ``FirmwareInventory`` (one ``$expand=.($levels=1)`` GET when ServiceRoot's
``ProtocolFeaturesSupported.ExpandQuery`` advertises it, DSP0266 "Query parameters";
otherwise the collection and each member, at most ``per_bmc`` at once) and always log out
(``DELETE`` the session, DSP0266 §13.3.4), also on errors and cancellation. The logout does
not hold the BMC's ``concurrency`` slot, but a result is yielded only after its logout, and
the generator does not finish before every logout it started has ended.

A BMC that cannot be read ends as ``SweepResult(readable=False, error=...)``; it is never
skipped. An ``http://`` BMC is sent no credentials, and is unreadable for it, unless its target
allows plain http; those that do are named in one warning per sweep. Close the iterator early
with ``contextlib.aclosing`` so that open sessions are deleted promptly. Performance basis:
research/perf.md section 5 (aiohttp); each BMC visit has its own short-lived connection pool
(``lockstep_redfish.session``). A process that sweeps large fleets should run under
:func:`sweep_gc` (``lockstep bench sweep`` shows why).
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import AsyncGenerator, Iterator, Mapping, Sequence
from contextlib import aclosing, contextmanager
from dataclasses import dataclass, field

from lockstep_inventory.adapters.bmc_reader import BmcReader, ProfileMemo, SweepResult
from lockstep_redfish.credentials import CredentialSource
from lockstep_redfish.session import BmcTarget, RedfishClient
from lockstep_redfish.transport import RetryPolicy

__all__ = ["DEFAULT_OPTIONS", "SweepOptions", "SweepResult", "sweep", "sweep_gc"]
log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SweepOptions:
    """Knobs of :func:`sweep`.

    ``timeout_s`` bounds each HTTP attempt; each request is tried ``retries + 1`` times.
    TLS verification is on unless ``verify_tls`` (sweep default) or ``BmcTarget.verify_tls``
    (per BMC) turns it off, which is logged for every BMC concerned.
    """

    concurrency: int = 512
    per_bmc: int = 2
    timeout_s: float = 10.0
    retries: int = 2
    backoff_s: float = 0.5
    verify_tls: bool = True
    use_expand: bool | None = None  # None: when advertised; False: never; True: always
    max_retry_after_s: float = 30.0
    # Node id -> the BMC profile its members are mapped by, instead of the one chosen from
    # what the BMC says; ``profiles`` remembers the chosen ones across sweeps (bmc_reader).
    named_profiles: Mapping[str, str] = field(default_factory=dict)
    profiles: ProfileMemo = field(default_factory=ProfileMemo)

    def __post_init__(self) -> None:
        bad = (
            self.concurrency < 1
            or self.per_bmc < 1
            or self.retries < 0
            or self.timeout_s <= 0
            or self.backoff_s < 0
        )
        if bad:
            raise ValueError("concurrency, per_bmc >= 1; retries, backoff_s >= 0; timeout_s > 0")


DEFAULT_OPTIONS = SweepOptions()


@contextmanager
def sweep_gc(young: int = 50_000) -> Iterator[None]:
    """Garbage-collector settings for a process whose main job is sweeping, restored on exit.

    Process-wide: use it in a composition root (a service's main, a CLI command), never
    inside a library call. Why: each BMC visit allocates a few hundred objects that live one
    to three round trips (0.2-0.6 s at BMC latencies); with the default threshold (700) they
    survive two young collections and are promoted, so a sweep of thousands of BMCs pays
    full collections over everything in flight (measured: ~40% of the client CPU of a
    4,000-BMC sweep). ``gc.freeze()`` takes the start-up heap (modules, pydantic schemas) out
    of every collection, and a young threshold of ``young`` allocations lets a visit's objects
    die before they are promoted. Reference cycles are still collected.
    """
    before = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(young, before[1], before[2])
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()


async def sweep(
    targets: Sequence[BmcTarget],
    *,
    credentials: CredentialSource,
    options: SweepOptions = DEFAULT_OPTIONS,
) -> AsyncGenerator[SweepResult, None]:
    """Read the firmware inventory of every target; results stream in completion order."""
    async with aclosing(_sweep(targets, credentials, options)) as results:
        async for result in results:
            yield result


def warn_plain_http(targets: Sequence[BmcTarget], shown: int = 20) -> None:
    """One warning per sweep naming the BMCs whose credentials go over plain http because
    their entries allow it (the others are refused, each with its reason, by the session)."""
    plain = [t.node_id for t in targets if t.plain_http and t.allow_plain_http]
    if plain:
        more = f" and {len(plain) - shown} more" if len(plain) > shown else ""
        log.warning(
            "sending BMC credentials over plain http (allowed by their registry entries) to "
            "%d BMC(s): %s%s",
            len(plain),
            ", ".join(plain[:shown]),
            more,
        )


async def _sweep(
    targets: Sequence[BmcTarget], credentials: CredentialSource, options: SweepOptions
) -> AsyncGenerator[SweepResult, None]:
    if not targets:
        return
    warn_plain_http(targets)
    policy = RetryPolicy(
        options.timeout_s, options.retries, options.backoff_s, options.max_retry_after_s
    )
    # Bounds: ``reading`` BMCs between login and the end of their inventory read (the
    # ``concurrency`` knob); ``admitted`` BMCs started but not yet taken by the consumer, so a
    # slow consumer stalls the sweep instead of piling up results. Logouts run outside the
    # ``reading`` bound (the next BMC starts while the DELETE is in flight) but inside
    # ``admitted``: a result is delivered only once its session is deleted (or failed to be).
    # Requests in flight are bounded by ``concurrency`` too (the reader's slots), logouts
    # by ``admitted``. TLS verification is on by default and only relaxed per request
    # for a BMC whose setting says so.
    reading = asyncio.Semaphore(options.concurrency)
    admitted = asyncio.Semaphore(2 * options.concurrency)
    results: asyncio.Queue[SweepResult] = asyncio.Queue()
    running: set[asyncio.Task[None]] = set()
    client = RedfishClient(
        credentials,
        policy,
        per_bmc=options.per_bmc,
        verify_tls=options.verify_tls,
        slots=options.concurrency,
    )
    reader = BmcReader(
        client, options.use_expand, named=options.named_profiles, memo=options.profiles
    )

    async def one(target: BmcTarget) -> None:
        held = True

        def release() -> None:  # exactly once, whichever comes first
            nonlocal held
            if held:
                held = False
                reading.release()

        try:
            result = await reader.read(target, on_read=release)
        except Exception as exc:  # noqa: BLE001 - one BMC's bug must not stall the sweep
            log.error("BMC %s: unexpected %s", target.node_id, type(exc).__name__)
            error = f"unexpected {type(exc).__name__} while reading {target.url}"
            result = SweepResult(target.node_id, readable=False, error=error)
        finally:
            release()
        results.put_nowait(result)

    async def feed() -> None:
        for target in targets:
            await admitted.acquire()
            await reading.acquire()  # released by ``reader.read`` before its logout
            task = asyncio.create_task(one(target))
            running.add(task)
            task.add_done_callback(running.discard)

    feeder = asyncio.create_task(feed())
    try:
        for _ in range(len(targets)):
            result = await results.get()
            admitted.release()
            yield result
    finally:
        # Readers delete their sessions on the way out (``read`` finishes its logout
        # despite the cancellation), and every one is awaited here, so no session of this
        # sweep is left open once the generator has finished.
        feeder.cancel()
        for task in running:
            task.cancel()
        await asyncio.gather(feeder, *running, return_exceptions=True)
