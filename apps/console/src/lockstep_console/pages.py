"""What each page shows, from the services' answers: pure functions, no I/O (the server asks
the ``Source`` and renders these with the templates).

Nothing here judges: a gate's numbers are the ``GateDecision`` in ``gate show``'s answer as
given, and the fleet's counts are the inventory's; aggregating is adding counts up (by pool, by
profile, by site) and cutting long lists into pages, so that a 12,500-node fleet is a page of
groups, never 12,500 rows.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from markupsafe import Markup

from lockstep_console import svg
from lockstep_gate.decision import GateDecision, MetricJudgement, RuleHit

if TYPE_CHECKING:
    from lockstep_common.events.v1 import (
        Conformance,
        FleetDriftAnswered,
        FleetStatusAnswered,
        GateVerdictRecord,
        RolloutState,
        RolloutWaveState,
    )

GROUPS_PAGE = 25


def wave_bar(wave: RolloutWaveState) -> Markup:
    waiting = max(wave.nodes - wave.succeeded - wave.failed, 0)
    return svg.share_bar(
        [
            ("done", wave.succeeded, svg.GOOD),
            ("failed", wave.failed, svg.BAD),
            ("not done", waiting, "#ffffff"),
        ],
        what=f"wave {wave.number}",
    )


def conformance_bar(c: Conformance, what: str) -> Markup:
    return svg.share_bar(
        [
            ("conforming", c.conforming, svg.GOOD),
            ("drifted", c.drifted, svg.BAD),
            ("unreadable", c.unreadable, svg.GREY),
            ("unobserved", c.unobserved, "#ffffff"),
        ],
        what=what,
    )


def progress(state: RolloutState) -> dict[str, Any]:
    """The live part of a rollout's page (replaced as events arrive)."""
    total = sum(state.nodes_by_step.values())
    return {
        "state": state,
        "waves": [(w, wave_bar(w)) for w in state.waves],
        "steps": sorted(state.nodes_by_step.items()),
        "steps_total": total,
    }


@dataclass(frozen=True, slots=True)
class MetricView:
    metric: str
    stratum: str
    outcome: str
    critical: bool
    detail: str
    comparison: Any
    environment: Any
    offending: tuple[str, ...]
    distributions: Markup
    effect: Markup


@dataclass(frozen=True, slots=True)
class HitView:
    rule: str
    stratum: str
    hit: RuleHit

    @property
    def when(self) -> str:
        return datetime.fromtimestamp(self.hit.at, UTC).strftime("%Y-%m-%d %H:%M:%S")


HITS_PAGE = 200  # rows of the hits table; the rest are counted (a 12,500-node fleet's wave)


def hits_view(record: GateVerdictRecord, decision: GateDecision) -> dict[str, Any]:
    """The hard-rule hits of a verdict in time order, drawn on a timeline over the window
    judged and listed in a table (the plot's text equivalent, WCAG 2.2 SC 1.1.1)."""
    hits = sorted(
        (HitView(str(f.rule), f.stratum, h) for f in decision.rules for h in f.hits),
        key=lambda v: (v.hit.at, v.hit.node, v.rule),
    )
    rules = sorted({v.rule for v in hits})
    plot = svg.timeline(
        [(v.hit.node, v.rule, v.hit.at) for v in hits],
        record.window_start.timestamp(),
        record.window_end.timestamp(),
        rules=rules,
    )
    return {"hits": hits[:HITS_PAGE], "hits_total": len(hits), "timeline": plot}


def metric_views(judged: Sequence[MetricJudgement]) -> list[MetricView]:
    """Each metric in each stratum with its plots, drawn from the judgements as given."""
    metrics = []
    for j in judged:
        c = j.comparison
        metrics.append(
            MetricView(
                metric=j.metric,
                stratum=j.stratum,
                outcome=j.outcome.value,
                critical=j.critical,
                detail=j.detail,
                comparison=c,
                environment=j.environment,
                offending=j.offending_nodes,
                distributions=svg.distributions(
                    c.canary_deciles, c.control_deciles, metric=j.metric, stratum=j.stratum
                )
                if c is not None
                else Markup(""),
                effect=svg.effect(c.shift, c.low, c.high, c.floor, metric=j.metric)
                if c is not None
                else Markup(""),
            )
        )
    return metrics


def _utc(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S")


def gate_view(record: GateVerdictRecord) -> dict[str, Any]:
    """One wave's verdict with its evidence: the decision as the healthgate recorded it, and for
    a hard rule's trip the judge's comparison as of the trip (evidence only: it did not decide),
    drawn the same way as a judged gate's metrics."""
    decision = GateDecision.model_validate(record.decision)
    trip = decision.at_trip
    return {
        "record": record,
        "decision": decision,
        "metrics": metric_views(decision.metrics),
        "at_trip": trip,
        "trip_metrics": metric_views(trip.metrics) if trip is not None else [],
        "trip_window": (_utc(trip.window_start), _utc(trip.window_end)) if trip else None,
        **hits_view(record, decision),
    }


def _sum(groups: list[Conformance], **labels: str) -> dict[str, Any]:
    keys = ("nodes", "conforming", "drifted", "unreadable", "unobserved")
    out: dict[str, Any] = {k: sum(getattr(g, k) for g in groups) for k in keys}
    out.update(labels)
    return out


def fleet_view(status: FleetStatusAnswered, drift: FleetDriftAnswered, page: int) -> dict[str, Any]:
    """The fleet at a glance: totals, by pool and by profile (sums of the inventory's groups),
    a page of its (pool, profile) groups, drifted nodes by kind, and one page of the drift
    report with its counts by site, kind and severity."""
    groups = list(status.groups)
    by_pool: dict[str, list[Conformance]] = {}
    by_profile: dict[str, list[Conformance]] = {}
    for g in groups:
        by_pool.setdefault(g.pool, []).append(g)
        by_profile.setdefault(g.profile, []).append(g)
    pages = max((len(groups) + GROUPS_PAGE - 1) // GROUPS_PAGE, 1)
    page = min(max(page, 1), pages)
    shown = groups[(page - 1) * GROUPS_PAGE : page * GROUPS_PAGE]
    sites: Counter[str] = Counter()
    kinds: Counter[tuple[str, str]] = Counter()
    for node in drift.nodes:
        sites[node.site] += 1
        for item in node.items:
            kinds[(item.kind.value, item.severity.value)] += 1
    return {
        "status": status,
        "fleet_bar": conformance_bar(status.fleet, "the fleet"),
        "pools": [_sum(v, name=k) for k, v in sorted(by_pool.items())],
        "profiles": [_sum(v, name=k) for k, v in sorted(by_profile.items())],
        "groups": [(g, conformance_bar(g, f"{g.pool} {g.profile}")) for g in shown],
        "page": page,
        "pages": pages,
        "drift": drift,
        "drift_sites": sorted(sites.items()),
        "drift_kinds": sorted(kinds.items()),
    }
