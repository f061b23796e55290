"""Apply reports and re-judge drift, inside the caller's transaction (sweeps and consumers).

The one path every change of a node's state takes, whatever brought it (a Redfish sweep, an
agent report, a new pin, a wave starting or ending):

1. lock the nodes concerned (``state.lock_nodes``, id order);
2. keep each report that supersedes the stored one (sequence order; stale and duplicate reports
   change nothing) and append what changed to ``history``;
3. re-evaluate the drift set of every node whose state changed and emit ``drift.detected`` /
   ``drift.resolved`` through the outbox only when the set changed (``drift.decide``).

Everything is written in the caller's transaction together with the outbox rows, so a crash
leaves either all of it or none of it.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from lockstep_common import subjects
from lockstep_common.db import Conn
from lockstep_common.events.v1 import DriftDetected, DriftResolved
from lockstep_common.outbox import EventSink
from lockstep_common.vocabulary import ObservationSource
from lockstep_inventory.adapters import state
from lockstep_inventory.domain.drift import Emit, decide
from lockstep_inventory.domain.evaluate import RolloutFacts, evaluate
from lockstep_inventory.domain.fleet_file import NodeEntry
from lockstep_inventory.domain.observation import Observation, changes, content_digest
from lockstep_inventory.domain.pins import pin_of
from lockstep_inventory.domain.rules import CompatibilityRules

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Outcome:
    """What one call changed."""

    applied: int = 0
    ignored: int = 0  # stale or duplicate reports
    detected: list[str] = field(default_factory=list)  # node ids
    resolved: list[str] = field(default_factory=list)

    def add(self, other: Outcome) -> None:
        self.applied += other.applied
        self.ignored += other.ignored
        self.detected += other.detected
        self.resolved += other.resolved


async def apply_reports(
    conn: Conn,
    reports: Sequence[tuple[str, Observation]],
    emitter: EventSink,
    *,
    now: dt.datetime,
    rules: CompatibilityRules,
) -> Outcome:
    """Apply ``(node id, report)`` pairs in order; judge the nodes whose state changed.

    The steady state of a fleet is a report that repeats the stored one. Those are recognised
    by digest (``observation.content_digest``) against the stored row's head, without reading
    its jsonb, and only move its sequence and times; the full stored report is read only for
    the (node, source) pairs whose versions or readability may have changed.
    """
    outcome = Outcome()
    if not reports:
        return outcome
    ids = {node_id for node_id, _ in reports}
    nodes, judged = await state.lock_nodes_judged(conn, ids)
    stored_heads = await state.heads(conn, ids)
    digests = [content_digest(r) for _, r in reports]
    need_full = {
        node_id
        for (node_id, r), d in zip(reports, digests, strict=True)
        if not _repeats(stored_heads.get((node_id, r.source)), r, d)
    }
    full = await state.observations(conn, need_full) if need_full else {}
    latest: dict[tuple[str, ObservationSource], Observation] = {
        (n, src): o for n, by_source in full.items() for src, o in by_source.items()
    }
    kept: dict[tuple[str, ObservationSource], tuple[Observation, str]] = {}
    history: list[state.HistoryRow] = []
    touched: set[str] = set()
    for (node_id, incoming), incoming_digest in zip(reports, digests, strict=True):
        key = (node_id, incoming.source)
        head = stored_heads.get(key)
        current = latest.get(key)
        reference = current or (head.as_observation() if head else None)
        if not incoming.supersedes(reference):
            outcome.ignored += 1
            continue
        digest = incoming_digest
        if current is None and _repeats(head, incoming, digest):
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
                touched.add(node_id)
        latest[key] = report
        kept[key] = (report, digest)
        outcome.applied += 1
    rewrite: list[tuple[str, Observation]] = []
    same: list[tuple[str, Observation]] = []
    for (node_id, source), (report, digest) in kept.items():
        head = stored_heads.get((node_id, source))
        unchanged = head is not None and head.digest == digest
        (same if unchanged else rewrite).append((node_id, report))
    await state.save_observations(conn, rewrite)
    await state.touch_observations(conn, same)
    await state.append_history(conn, history)
    # A node is judged when what it runs changed, when it has never been judged, or when it
    # was last judged on an earlier day: date rules (a branch reaching end of life) change the
    # verdict on a node whose versions do not.
    candidates = {n for n, _ in kept if n in nodes}
    stale = {n for n in candidates if n not in judged or judged[n].date() < now.date()}
    to_judge = sorted((touched & candidates) | stale)
    if to_judge:
        stored = await state.observations(conn, to_judge)
        judge = {n: nodes[n] for n in to_judge}
        outcome.add(await judge_nodes(conn, judge, stored, emitter, now=now, rules=rules))
    return outcome


def _repeats(head: state.Head | None, report: Observation, digest: str) -> bool:
    """True when a readable report carries exactly the versions of a readable stored one."""
    return (
        head is not None
        and head.readable
        and report.readable
        and head.digest is not None
        and head.digest == digest
    )


async def rejudge(
    conn: Conn,
    node_ids: Iterable[str],
    emitter: EventSink,
    *,
    now: dt.datetime,
    rules: CompatibilityRules,
) -> Outcome:
    """Re-judge nodes after their pin or rollout facts changed."""
    nodes = await state.lock_nodes(conn, node_ids)
    stored = await state.observations(conn, nodes)
    return await judge_nodes(conn, nodes, stored, emitter, now=now, rules=rules)


async def judge_nodes(
    conn: Conn,
    nodes: Mapping[str, NodeEntry],
    stored: state.Observations,
    emitter: EventSink,
    *,
    now: dt.datetime,
    rules: CompatibilityRules,
) -> Outcome:
    """Evaluate each node's drift set; store and emit the ones that changed."""
    outcome = Outcome()
    ids = [n for n in nodes if stored.get(n)]  # a node nobody has reported on has no state
    if not ids:
        return outcome
    pins = await state.pins(conn)
    facts = await state.rollout_facts(conn, ids)
    previous = await state.drift(conn, ids)
    writes: dict[str, state.DriftRow] = {}
    for node_id in ids:
        node = nodes[node_id]
        pin = pin_of(node, pins)
        items = evaluate(
            node,
            stored[node_id],
            pin,
            facts.get(node_id, RolloutFacts()),
            today=now.date(),
            rules=rules,
        )
        before = previous.get(node_id)
        emit = decide(before.items if before else (), items)
        stack_hash = pin.stack_hash if pin else None
        if emit is Emit.NOTHING and before is not None:
            # Same set: keep its detail and start, record that it was judged now.
            writes[node_id] = state.DriftRow(stack_hash, before.items, before.since, now)
            continue
        writes[node_id] = state.DriftRow(stack_hash, items, now, now)
        if emit is Emit.DETECTED:
            emitter.emit(
                subjects.drift_detected(node.site, node_id),
                DriftDetected(node_id=node_id, site=node.site, stack_hash=stack_hash, items=items),
                about=node_id,
            )
            outcome.detected.append(node_id)
        elif emit is Emit.RESOLVED:
            emitter.emit(
                subjects.drift_resolved(node.site, node_id),
                DriftResolved(node_id=node_id, site=node.site, stack_hash=stack_hash),
                about=node_id,
            )
            outcome.resolved.append(node_id)
    await state.save_drift(conn, writes)
    return outcome
