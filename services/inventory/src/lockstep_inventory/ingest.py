"""Apply reports and re-judge drift, inside the caller's transaction (sweeps and consumers).

The one path every change of a node's state takes, whatever brought it (a Redfish sweep, an
agent report, a new pin, a wave starting or ending):

1. lock the nodes concerned (``NodeStore.lock_nodes``, id order);
2. keep each report that supersedes the stored one (sequence order; stale and duplicate reports
   change nothing) and append what changed to ``history``;
3. re-evaluate the drift set of every node whose state changed and emit ``drift.detected`` /
   ``drift.resolved`` through the outbox only when the set changed (``drift.decide``).

What to keep, write and judge is decided by the pure functions of ``domain/ingestion.py``; this
module reads what they need through a ``store.NodeStore`` (PostgreSQL in the service, memory in
unit tests), hands it to them, writes what they return and emits through an ``EventSink``.
Everything is written in the caller's transaction together with the outbox rows, so a crash
leaves either all of it or none of it.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from lockstep_common import subjects
from lockstep_common.compatibility.rules import CompatibilityRules
from lockstep_common.events.v1 import DriftDetected, DriftResolved
from lockstep_common.outbox import EventSink
from lockstep_inventory.domain import ingestion
from lockstep_inventory.domain.evaluate import RolloutFacts
from lockstep_inventory.domain.fleet_file import NodeEntry
from lockstep_inventory.domain.observation import Observation
from lockstep_inventory.store import NodeStore

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
    store: NodeStore,
    reports: Sequence[tuple[str, Observation]],
    emitter: EventSink,
    *,
    now: dt.datetime,
    rules: CompatibilityRules,
    swept: bool = False,
) -> Outcome:
    """Apply ``(node id, report)`` pairs in order; judge the nodes whose state changed.

    ``swept`` is for the sweep alone (``sweeping``, under the sweep lock): its Redfish reports
    replace whatever Redfish report is stored (``ingestion.keep``). Reports off the bus never
    set it, and the inventory's consumer refuses Redfish reports from the bus.

    The steady state of a fleet is a report that repeats the stored one. Those are recognised
    by digest (``observation.content_digest``) against the stored row's head, without reading
    its jsonb, and only move its sequence and times; the full stored report is read only for
    the (node, source) pairs whose versions or readability may have changed.
    """
    outcome = Outcome()
    if not reports:
        return outcome
    arrivals = ingestion.arrivals(reports)
    ids = {a.node_id for a in arrivals}
    nodes, judged = await store.lock_nodes_judged(ids)
    heads = await store.heads(ids)
    need_full = ingestion.to_read(arrivals, heads)
    full = await store.observations(need_full) if need_full else {}
    kept = ingestion.keep(arrivals, heads, full, swept=swept)
    await store.save_observations(kept.rewrite)
    await store.touch_observations(kept.touch)
    await store.append_history(kept.history)
    outcome.applied, outcome.ignored = kept.applied, kept.ignored
    to_judge = ingestion.to_judge(kept, nodes, judged, today=now.date())
    if to_judge:
        stored = await store.observations(to_judge)
        judge = {n: nodes[n] for n in to_judge}
        outcome.add(await judge_nodes(store, judge, stored, emitter, now=now, rules=rules))
    return outcome


async def rejudge(
    store: NodeStore,
    node_ids: Iterable[str],
    emitter: EventSink,
    *,
    now: dt.datetime,
    rules: CompatibilityRules,
) -> Outcome:
    """Re-judge nodes after their pin or rollout facts changed."""
    nodes = await store.lock_nodes(node_ids)
    stored = await store.observations(nodes)
    return await judge_nodes(store, nodes, stored, emitter, now=now, rules=rules)


async def judge_nodes(
    store: NodeStore,
    nodes: Mapping[str, NodeEntry],
    stored: ingestion.Observations,
    emitter: EventSink,
    *,
    now: dt.datetime,
    rules: CompatibilityRules,
) -> Outcome:
    """Evaluate each node's drift set; store and emit the ones that changed."""
    outcome = Outcome()
    ids = ingestion.judgeable(nodes, stored)
    if not ids:
        return outcome
    pins = await store.pins()
    facts = await store.rollout_facts(ids)
    previous = await store.drift(ids)
    writes: dict[str, ingestion.DriftRow] = {}
    for node_id in ids:
        verdict = ingestion.judge(
            nodes[node_id],
            stored[node_id],
            pins,
            facts.get(node_id, RolloutFacts()),
            previous.get(node_id),
            now=now,
            rules=rules,
        )
        writes[node_id] = verdict.row
        event = verdict.event
        if isinstance(event, DriftDetected):
            emitter.emit(subjects.drift_detected(event.site, node_id), event, about=node_id)
            outcome.detected.append(node_id)
        elif isinstance(event, DriftResolved):
            emitter.emit(subjects.drift_resolved(event.site, node_id), event, about=node_id)
            outcome.resolved.append(node_id)
    await store.save_drift(writes)
    return outcome
