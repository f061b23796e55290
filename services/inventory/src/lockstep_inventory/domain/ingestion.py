"""Which reports to keep, what they change, which nodes to re-judge, and each node's verdict (pure).

The decisions of ``ingest`` without its reads and writes, in the order it takes them:

1. :func:`arrivals`: each incoming report with its content digest, computed once;
2. :func:`to_read`: the nodes whose stored reports must be read in full. A report that repeats
   its stored head (same digest, both readable: the steady state of a fleet) needs no more than
   the head;
3. :func:`keep`: which reports supersede the stored ones (sequence order; stale and duplicate
   reports change nothing), the ``history`` rows of what changed, and which stored rows to
   rewrite versus only touch (sequence and times);
4. :func:`to_judge`: the nodes to re-judge: those whose versions or readability changed, never
   judged, or last judged on an earlier day (date rules such as a branch's end of life change
   the verdict on a node whose versions do not);
5. :func:`judge`: one node's drift set, the row to store and the event to emit, if any
   (``drift.decide``: only when the set changed).

``now`` and ``today`` are passed in; nothing here reads a clock, a file or a database.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from lockstep_common.compatibility.rules import CompatibilityRules
from lockstep_common.events.v1 import DriftDetected, DriftItem, DriftResolved
from lockstep_common.vocabulary import ObservationSource
from lockstep_inventory.domain.drift import Emit, decide, drift_key
from lockstep_inventory.domain.evaluate import RolloutFacts, evaluate
from lockstep_inventory.domain.fleet_file import NodeEntry
from lockstep_inventory.domain.observation import (
    MAX_SEQUENCE_LEAP,
    ImplausibleReport,
    Observation,
    changes,
    content_digest,
)
from lockstep_inventory.domain.pins import Pin, pin_of

Key = tuple[str, ObservationSource]  # (node id, source): one stored report
Observations = dict[str, dict[ObservationSource, Observation]]  # node -> source -> report
# (node, source, item, old version, new version, observed_at): one version change.
HistoryRow = tuple[str, str, str, str | None, str | None, dt.datetime]


@dataclass(frozen=True, slots=True)
class Head:
    """What a stored report's freshness and sameness are judged on (no jsonb read)."""

    source: ObservationSource
    sequence: int
    observed_at: dt.datetime
    readable: bool
    digest: str | None  # None: stored before digests were kept; compare in full

    def as_observation(self) -> Observation:
        """A content-less stand-in for ``Observation.supersedes``."""
        return Observation(self.source, self.sequence, self.observed_at, self.readable)


@dataclass(frozen=True, slots=True)
class DriftRow:
    """A node's stored drift set."""

    stack_hash: str | None
    items: tuple[DriftItem, ...]
    since: dt.datetime
    evaluated_at: dt.datetime


@dataclass(frozen=True, slots=True)
class Arrival:
    """An incoming report and the digest of its content."""

    node_id: str
    report: Observation
    digest: str


def arrivals(reports: Iterable[tuple[str, Observation]]) -> list[Arrival]:
    """``(node id, report)`` pairs with their digests, in order."""
    return [Arrival(node_id, r, content_digest(r)) for node_id, r in reports]


def repeats(head: Head | None, report: Observation, digest: str) -> bool:
    """True when a readable report carries exactly the versions of a readable stored one."""
    return (
        head is not None
        and head.readable
        and report.readable
        and head.digest is not None
        and head.digest == digest
    )


def to_read(reports: Iterable[Arrival], heads: Mapping[Key, Head]) -> set[str]:
    """Nodes whose stored reports must be read in full: those with a report that may change
    their versions or readability (anything but a repeat of the stored head)."""
    return {
        a.node_id
        for a in reports
        if not repeats(heads.get((a.node_id, a.report.source)), a.report, a.digest)
    }


@dataclass(frozen=True, slots=True)
class Kept:
    """What a batch of reports changes, ready to write."""

    applied: int  # reports that superseded the stored (or an earlier kept) one
    ignored: int  # stale or duplicate reports
    rewrite: list[tuple[str, Observation]]  # stored rows whose content changes (or new rows)
    touch: list[tuple[str, Observation]]  # stored rows whose versions repeat: times only
    history: list[HistoryRow]
    changed: frozenset[str]  # nodes whose versions or readability changed
    reported: frozenset[str]  # nodes with at least one kept report


def keep(
    reports: Sequence[Arrival],
    heads: Mapping[Key, Head],
    stored: Observations,
    *,
    swept: bool = False,
) -> Kept:
    """Apply ``reports`` in order over the stored state.

    ``heads`` holds every stored report's head; ``stored`` the full stored reports of (at
    least) the nodes :func:`to_read` named. A report that repeats its stored head is kept as
    it is, without a diff; any other is diffed against the stored (or earlier kept) report,
    and an unreadable one keeps the last known versions (``Observation.after_failure``).

    ``swept``: the Redfish reports are the running sweep's. Sweeps run one at a time under the
    sweep lock and take their ids (their reports' sequence) in order, so no stored Redfish
    report can come from a later sweep: one with a higher sequence is not a sweep's (a report
    off the bus before they were refused, a sweeps table restored from an older backup), and the
    sweep replaces it rather than being held off by it for good. Only a report of the same
    sweep is a duplicate.
    """
    latest: dict[Key, Observation] = {
        (n, src): o for n, by_source in stored.items() for src, o in by_source.items()
    }
    kept: dict[Key, tuple[Observation, str]] = {}
    history: list[HistoryRow] = []
    changed: set[str] = set()
    applied = ignored = 0
    for arrival in reports:
        node_id, incoming = arrival.node_id, arrival.report
        key = (node_id, incoming.source)
        head = heads.get(key)
        current = latest.get(key)
        reference = current or (head.as_observation() if head else None)
        if swept and incoming.source is ObservationSource.REDFISH:
            newer = reference is None or incoming.sequence != reference.sequence
        else:
            if reference is not None and incoming.sequence - reference.sequence > MAX_SEQUENCE_LEAP:
                raise ImplausibleReport(
                    f"report for {node_id} ({incoming.source}) leaps from sequence "
                    f"{reference.sequence} to {incoming.sequence}, more than "
                    f"{MAX_SEQUENCE_LEAP} ahead"
                )
            newer = incoming.supersedes(reference)
        if not newer:
            ignored += 1
            continue
        digest = arrival.digest
        if current is None and repeats(head, incoming, digest):
            report = incoming  # same versions as stored: nothing to diff
        else:
            report = incoming.after_failure(current)
            if report is not incoming:
                digest = content_digest(report)
            diff = [
                (node_id, str(report.source), item, old, new, report.observed_at)
                for item, old, new in changes(current, report)
            ]
            if diff:
                history.extend(diff)
                changed.add(node_id)
        latest[key] = report
        kept[key] = (report, digest)
        applied += 1
    rewrite: list[tuple[str, Observation]] = []
    touch: list[tuple[str, Observation]] = []
    for (node_id, source), (report, digest) in kept.items():
        head = heads.get((node_id, source))
        unchanged = head is not None and head.digest == digest
        (touch if unchanged else rewrite).append((node_id, report))
    return Kept(
        applied,
        ignored,
        rewrite,
        touch,
        history,
        frozenset(changed),
        frozenset(n for n, _ in kept),
    )


def to_judge(
    kept: Kept, registered: Collection[str], judged: Mapping[str, dt.datetime], *, today: dt.date
) -> list[str]:
    """Registered nodes to re-judge after ``kept`` (id order): what they run changed, or they
    were never judged, or last judged before ``today`` (date rules may have changed the verdict
    on the same versions)."""
    candidates = {n for n in kept.reported if n in registered}
    stale = {n for n in candidates if n not in judged or judged[n].date() < today}
    return sorted((kept.changed & candidates) | stale)


def judgeable(
    nodes: Iterable[str], stored: Mapping[str, Mapping[ObservationSource, Observation]]
) -> list[str]:
    """The nodes that have state to judge (a node nobody has reported on has none), in order."""
    return [n for n in nodes if stored.get(n)]


@dataclass(frozen=True, slots=True)
class Judgement:
    """One node judged: the drift row to store and the event to emit (None: nothing changed)."""

    node_id: str
    row: DriftRow
    event: DriftDetected | DriftResolved | None


def judge(
    node: NodeEntry,
    observations: Mapping[ObservationSource, Observation],
    pins: Iterable[Pin],
    facts: RolloutFacts,
    previous: DriftRow | None,
    *,
    now: dt.datetime,
    rules: CompatibilityRules,
) -> Judgement:
    """The node's drift set against its pin, compared with the stored one (``previous``).

    An unchanged set keeps its stored detail and start and only records that it was judged
    ``now``; a changed one starts ``now`` and is announced: ``drift.detected`` when not empty,
    ``drift.resolved`` when it became empty.
    """
    pin = pin_of(node, pins)
    items = evaluate(node, observations, pin, facts, today=now.date(), rules=rules)
    emit = decide(previous.items if previous else (), items, pinned=pin is not None)
    stack_hash = pin.stack_hash if pin else None
    if emit is Emit.NOTHING and previous is not None:
        # Nothing to announce; the stored set still follows what was seen (an unpinned node's
        # unknown versions change without an event), keeping when the drift began.
        kept = previous.items if drift_key(previous.items) == drift_key(items) else items
        return Judgement(node.id, DriftRow(stack_hash, kept, previous.since, now), None)
    row = DriftRow(stack_hash, items, now, now)
    event: DriftDetected | DriftResolved | None = None
    if emit is Emit.DETECTED:
        event = DriftDetected(node_id=node.id, site=node.site, stack_hash=stack_hash, items=items)
    elif emit is Emit.RESOLVED:
        event = DriftResolved(node_id=node.id, site=node.site, stack_hash=stack_hash)
    return Judgement(node.id, row, event)
