"""One Redfish sweep of the registered fleet, committed as it goes (service worker and CLI).

Results stream from the sweeper into chunks; each chunk is applied (``ingest.apply_reports``)
in one transaction together with its drift events (outbox) and the sweep's progress, while the
sweeper keeps reading BMCs: at most one chunk is being written at a time, and the next one
grows meanwhile, so slow commits make bigger chunks rather than a stalled sweep.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import functools
import logging
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field

import asyncpg

from lockstep_common.compatibility.rules import CompatibilityRules
from lockstep_common.db import retried_on_conflict
from lockstep_common.outbox import emitting
from lockstep_common.vocabulary import ObservationSource, as_version
from lockstep_inventory import ingest
from lockstep_inventory.adapters import pg_store, sweeps
from lockstep_inventory.adapters.bmc_reader import ProfileMemo, member_facts
from lockstep_inventory.adapters.sweeper import SweepOptions, SweepResult, sweep
from lockstep_inventory.domain.fleet_file import NodeEntry
from lockstep_inventory.domain.members import Member
from lockstep_inventory.domain.observation import Observation, from_redfish_members, unreadable
from lockstep_inventory.settings import Expand, Settings
from lockstep_redfish.credentials import RegistryCredentials
from lockstep_redfish.profile import profile_named
from lockstep_redfish.session import BmcTarget

log = logging.getLogger(__name__)
UNAVAILABLE = "(unavailable)"  # a member whose device no longer answers its BMC: no Version


@dataclass(slots=True)
class SweepSummary:
    """What one sweep read and changed."""

    sweep_id: int
    total: int
    seconds: float = 0.0
    unreadable: int = 0
    expanded: int = 0
    outcome: ingest.Outcome = field(default_factory=ingest.Outcome)
    results: list[SweepResult] = field(default_factory=list)


def report_of(result: SweepResult, sequence: int, now: dt.datetime) -> Observation:
    """The report a sweep result makes: members with versions, grouped by the BMC profile the
    reader chose (``SweepResult.profile``), or unreadable with the reason. A result that names
    no profile (the reader always names one) is read as the updater reads a member it chose no
    profile for: by the shipped profiles in order of priority (``members.map_member``)."""
    if not result.readable:
        return unreadable(ObservationSource.REDFISH, sequence, now, result.error or "unreadable")
    members = []
    for m in result.members:
        facts = member_facts(m)
        # A BMC's Version is free text: kept as far as an event can carry it (``as_version``).
        version = as_version(m.Version or UNAVAILABLE)
        members.append(Member(m.Id, version, m.Name, facts.software_id, facts.related, facts.oem))
    profile = profile_named(result.profile) if result.profile is not None else None
    return from_redfish_members(sequence, now, members, profile)


ResultsOf = Callable[[Sequence[BmcTarget]], AsyncGenerator[SweepResult, None]]


class SweepBusyError(RuntimeError):
    """Another sweep holds the sweep lock."""


async def run_sweep(
    pool: asyncpg.Pool,
    nodes: Sequence[NodeEntry],
    settings: Settings,
    *,
    by: str,
    source: str,
    rules: CompatibilityRules,
    wait: bool = True,
    keep_results: bool = False,
    on_progress: Callable[[int, int], None] | None = None,
    results_of: ResultsOf | None = None,
) -> SweepSummary:
    """Sweep ``nodes`` under the sweep lock and commit every result.

    ``wait=False`` raises :class:`SweepBusyError` instead of waiting for a running sweep.
    ``results_of`` replaces the Redfish sweeper (benchmarks feed recorded results through it).
    """
    async with pool.acquire() as lock_conn:
        if wait:
            await lock_conn.execute(f"SELECT pg_advisory_lock({sweeps.SWEEP_LOCK_KEY})")
        elif not await lock_conn.fetchval(f"SELECT pg_try_advisory_lock({sweeps.SWEEP_LOCK_KEY})"):
            raise SweepBusyError("another sweep is running")
        try:
            return await _locked_sweep(
                pool, nodes, settings, by, source, rules, keep_results, on_progress, results_of
            )
        finally:
            with contextlib.suppress(Exception):
                await lock_conn.execute(f"SELECT pg_advisory_unlock({sweeps.SWEEP_LOCK_KEY})")


ReaderOf = Callable[[Sequence[NodeEntry]], ResultsOf]
"""What reads a sweep's nodes: given the nodes (and so their credentials), their results."""


def redfish_reader(settings: Settings) -> ReaderOf:
    """The Redfish sweeper under ``settings``: what the service reads its BMCs with (built in
    ``app.py``; ``run_sweep`` falls back to it when given no ``results_of``)."""
    return functools.partial(_redfish, settings=settings, memo=ProfileMemo())


def _redfish(nodes: Sequence[NodeEntry], settings: Settings, memo: ProfileMemo) -> ResultsOf:
    credentials = RegistryCredentials({n.id: n.credentials for n in nodes})
    expand = {Expand.AUTO: None, Expand.ALWAYS: True, Expand.NEVER: False}[settings.sweep_expand]
    options = SweepOptions(
        concurrency=settings.sweep_concurrency,
        per_bmc=settings.sweep_per_bmc,
        timeout_s=settings.sweep_timeout_s,
        retries=settings.sweep_retries,
        verify_tls=settings.sweep_verify_tls,
        use_expand=expand,
        named_profiles={
            n.id: named for n in nodes if (named := settings.profile_named_for(n.id, n.profile))
        },
        profiles=memo,
    )

    def results(targets: Sequence[BmcTarget]) -> AsyncGenerator[SweepResult, None]:
        return sweep(targets, credentials=credentials, options=options)

    return results


@dataclass(slots=True)
class _Committer:
    """Applies chunks of one sweep's results, one transaction each."""

    pool: asyncpg.Pool
    summary: SweepSummary
    source: str
    rules: CompatibilityRules
    on_progress: Callable[[int, int], None] | None
    done: int = 0

    async def commit(self, chunk: list[SweepResult]) -> None:
        now = dt.datetime.now(dt.UTC)
        sweep_id = self.summary.sweep_id
        reports = [(r.node_id, report_of(r, sweep_id, now)) for r in chunk]
        bad = sum(not r.readable for r in chunk)
        expanded = sum(r.expanded for r in chunk)

        async def transaction() -> ingest.Outcome:
            async with self.pool.acquire() as conn, emitting(conn, self.source) as out:
                outcome = await ingest.apply_reports(
                    pg_store.PgInventoryStore(conn),
                    reports,
                    out,
                    now=now,
                    rules=self.rules,
                    swept=True,  # under the sweep lock: the newest sweep there is
                )
                await sweeps.progress(conn, sweep_id, len(chunk), bad, expanded)
            return outcome

        # A chunk locks its nodes in id order, but the consumers apply a pulled batch of
        # rollout events (device.*, wave.*) in one transaction, each event locking its nodes
        # in stream order: a deadlock between the two is possible. PostgreSQL aborts one side;
        # the consumer replays its batch one event per call (lockstep_common.consumer), and a
        # chunk is applied again here instead of the whole sweep being lost (found by the
        # chaos test under load).
        outcome = await retried_on_conflict(transaction, what=f"sweep {sweep_id} chunk")
        self.summary.outcome.add(outcome)
        self.summary.unreadable += bad
        self.summary.expanded += expanded
        self.done += len(chunk)
        if self.on_progress is not None:
            self.on_progress(self.done, self.summary.total)


async def _locked_sweep(
    pool: asyncpg.Pool,
    nodes: Sequence[NodeEntry],
    settings: Settings,
    by: str,
    source: str,
    rules: CompatibilityRules,
    keep_results: bool,
    on_progress: Callable[[int, int], None] | None,
    results_of: ResultsOf | None,
) -> SweepSummary:
    async with pool.acquire() as conn:
        row = await sweeps.start(conn, len(nodes), by)
    summary = SweepSummary(row.id, len(nodes))
    started = time.perf_counter()
    read = results_of or _redfish(nodes, settings, ProfileMemo())
    committer = _Committer(pool, summary, source, rules, on_progress)
    writing: asyncio.Task[None] | None = None
    buffer: list[SweepResult] = []
    try:
        targets = [BmcTarget(n.id, n.bmc_url, allow_plain_http=n.allow_plain_http) for n in nodes]
        async with aclosing(read(targets)) as results:
            async for result in results:
                buffer.append(result)
                if keep_results:
                    summary.results.append(result)
                if len(buffer) >= settings.sweep_chunk and (writing is None or writing.done()):
                    if writing is not None:
                        await writing  # surfaces a failed commit
                    writing = asyncio.create_task(committer.commit(buffer))
                    buffer = []
        if writing is not None:
            await writing
        if buffer:
            await committer.commit(buffer)
    except BaseException as exc:
        await _abandon(pool, row.id, writing, exc)
        raise
    async with pool.acquire() as conn:
        await sweeps.finish(conn, row.id)
    summary.seconds = time.perf_counter() - started
    log.info(
        "sweep %d: %d BMCs in %.1fs, %d unreadable, %d drift detected, %d resolved",
        row.id,
        len(nodes),
        summary.seconds,
        summary.unreadable,
        len(summary.outcome.detected),
        len(summary.outcome.resolved),
    )
    return summary


async def _abandon(
    pool: asyncpg.Pool, sweep_id: int, writing: asyncio.Task[None] | None, exc: BaseException
) -> None:
    """Record why the sweep ended early. A chunk being committed holds results already read,
    so it is let finish, unless the sweep itself is being cancelled (the service stopping)."""
    if writing is not None and not writing.done():
        if isinstance(exc, asyncio.CancelledError):
            writing.cancel()
        with contextlib.suppress(BaseException):
            await writing
    with contextlib.suppress(Exception):
        async with pool.acquire() as conn:
            await sweeps.finish(conn, sweep_id, f"{type(exc).__name__}: {exc}"[:1000])
