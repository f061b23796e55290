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
from typing import Protocol

from lockstep_common import subjects
from lockstep_common.db import Conn
from lockstep_common.envelope import Envelope, EventData
from lockstep_common.events.v1 import DriftDetected, DriftResolved
from lockstep_common.vocabulary import ObservationSource
from lockstep_inventory.adapters import state
from lockstep_inventory.domain.drift import Emit, decide
from lockstep_inventory.domain.evaluate import RolloutFacts, evaluate
from lockstep_inventory.domain.fleet_file import NodeEntry
from lockstep_inventory.domain.observation import Observation, changes
from lockstep_inventory.domain.pins import pin_of
from lockstep_inventory.domain.rules import CompatibilityRules

log = logging.getLogger(__name__)


class Emitter(Protocol):
    """Where drift events go (``HandlerContext``: the outbox, in the same transaction)."""

    def emit(
        self, subject: str, data: EventData, *, about: str | None = None
    ) -> Envelope[EventData]: ...


@dataclass(slots=True)
class Outcome:
    """What one call changed."""

    applied: int = 0
    ignored: int = 0  # stale or duplicate reports
    unregistered: int = 0  # reports about nodes not in the registry (kept, not judged)
    evaluated: int = 0
    detected: list[str] = field(default_factory=list)  # node ids
    resolved: list[str] = field(default_factory=list)

    def add(self, other: Outcome) -> None:
        self.applied += other.applied
        self.ignored += other.ignored
        self.unregistered += other.unregistered
        self.evaluated += other.evaluated
        self.detected += other.detected
        self.resolved += other.resolved


async def apply_reports(
    conn: Conn,
    reports: Sequence[tuple[str, Observation]],
    emitter: Emitter,
    *,
    now: dt.datetime,
    rules: CompatibilityRules | None = None,
) -> Outcome:
    """Apply ``(node id, report)`` pairs in order; judge the nodes whose state changed."""
    outcome = Outcome()
    if not reports:
        return outcome
    ids = {node_id for node_id, _ in reports}
    nodes = await state.lock_nodes(conn, ids)
    stored = await state.observations(conn, ids)
    before = {(n, src): o for n, by_source in stored.items() for src, o in by_source.items()}
    kept: dict[tuple[str, ObservationSource], Observation] = {}
    history: list[state.HistoryRow] = []
    touched: set[str] = set()
    for node_id, incoming in reports:
        current = stored.get(node_id, {}).get(incoming.source)
        if not incoming.supersedes(current):
            outcome.ignored += 1
            continue
        report = incoming.after_failure(current)
        # The usual report repeats the last one: nothing to diff (``changes`` would agree).
        unchanged = (
            current is not None
            and report.readable == current.readable
            and _same_versions(current, report)
        )
        diff = (
            []
            if unchanged
            else [
                (node_id, str(report.source), item, old, new, report.observed_at)
                for item, old, new in changes(current, report)
            ]
        )
        if diff:
            history.extend(diff)
            touched.add(node_id)
        stored.setdefault(node_id, {})[report.source] = report
        kept[(node_id, report.source)] = report
        outcome.applied += 1
    outcome.unregistered = len({n for n, _ in kept} - set(nodes))
    # Most reports repeat the stored versions: those only move the sequence and times.
    rewrite: list[tuple[str, Observation]] = []
    same: list[tuple[str, Observation]] = []
    for key, report in kept.items():
        (same if _same_versions(before.get(key), report) else rewrite).append((key[0], report))
    await state.save_observations(conn, rewrite)
    await state.touch_observations(conn, same)
    await state.append_history(conn, history)
    # A node is judged when what it runs changed, or when it has never been judged.
    candidates = {n for n, _ in kept if n in nodes}
    unjudged = candidates - touched - set(await state.drift_exists(conn, candidates - touched))
    judge = {n: nodes[n] for n in sorted(touched & candidates | unjudged)}
    outcome.add(await judge_nodes(conn, judge, stored, emitter, now=now, rules=rules))
    return outcome


def _same_versions(stored: Observation | None, report: Observation) -> bool:
    """True when ``report`` carries exactly the stored versions (only sequence/times differ)."""
    return (
        stored is not None
        and report.components == stored.components
        and report.conflicts == stored.conflicts
        and report.members == stored.members
        and report.firmware_dirs == stored.firmware_dirs
        and report.loaded_module == stored.loaded_module
    )


async def rejudge(
    conn: Conn,
    node_ids: Iterable[str] | None,
    emitter: Emitter,
    *,
    now: dt.datetime,
    rules: CompatibilityRules | None = None,
) -> Outcome:
    """Re-judge nodes after their pin or rollout facts changed (``None``: every node)."""
    if node_ids is None:
        node_ids = await state.observed_node_ids(conn)
    nodes = await state.lock_nodes(conn, node_ids)
    stored = await state.observations(conn, nodes)
    return await judge_nodes(conn, nodes, stored, emitter, now=now, rules=rules)


async def judge_nodes(
    conn: Conn,
    nodes: Mapping[str, NodeEntry],
    stored: state.Observations,
    emitter: Emitter,
    *,
    now: dt.datetime,
    rules: CompatibilityRules | None = None,
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
        outcome.evaluated += 1
        before = previous.get(node_id)
        emit = decide(before.items if before else (), items)
        stack_hash = pin.stack_hash if pin else None
        if emit is Emit.NOTHING and before is not None:
            if before.stack_hash != stack_hash:
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
