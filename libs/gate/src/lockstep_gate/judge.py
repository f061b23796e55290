"""The judge: canary against a concurrent control, per metric and per stratum, plus hard rules.

Method (Kayenta's NetflixACAJudge, peers.md section 10, with the node as the unit):

1. Rows after ``now`` are ignored; missing values (null, NaN, infinity) are removed or become 0 by
   the metric's rule.
2. Each node's samples in the window become one value: outliers outside the IQR fences (factor
   3, Kayenta's) are dropped within the node's series, then the median (gauges) or mean (counters)
   is taken. Nodes, not samples, are compared: samples of one node are not independent, and
   treating them so would turn every persistent node-to-node difference into "significance".
   A node with fewer than ``minimum.samples_per_node`` samples does not count.
3. Per stratum, the canary's node values against the control's: the Hodges-Lehmann shift and
   Lehmann's distribution-free interval (:mod:`.stats`) and the Mann-Whitney U p-value. A
   metric is worse only when the whole interval lies beyond the effect-size floor in the harmful
   direction. Fewer nodes than the minimum, or too few for an interval, is no data. A metric
   that no node of the stratum reported at all, canary or control, is not judged (an agent
   that does not measure it says nothing about the update): it is named in the reason and
   left out of the score, unless the policy marks it ``required`` (then it is no data).
4. Environmental check: each group against its own baseline samples (the same test), or when
   there are none against the policy's expected value (the median's sign-test interval). When the
   control and the canary are both degraded, the metric is environmental: the rollout is not
   blamed and a human is asked. A busbw drop seen so also makes canary nodes under the busbw bar
   environmental unless the canary is under it significantly more often (:mod:`.hard_rules`).
5. Verdict: a hard rule broken on a canary node (and not environmental), a worse critical
   metric, or a score under ``marginal_score`` trips; otherwise any no-data or environmental
   metric or finding, or a score under ``pass_score``, is inconclusive; else the gate passes.

Everything is a function of the samples, the policy, the roster and ``now``: the same inputs give
the same decision, whatever the order of the rows.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from lockstep_common.vocabulary import GateVerdict
from lockstep_gate.decision import (
    Comparison,
    Environment,
    GateDecision,
    HardRule,
    MetricJudgement,
    MetricOutcome,
    RuleFinding,
    TripEvidence,
)
from lockstep_gate.hard_rules import BUSBW, check_hard_rules
from lockstep_gate.policy import (
    Aggregate,
    Harmful,
    MetricDefinition,
    MissingRule,
    Outliers,
    Policy,
)
from lockstep_gate.samples import DEFAULT_STRATUM, Floats, Ints, SampleTable
from lockstep_gate.stats import (
    Shift,
    aggregate_segments,
    mann_whitney_p,
    median_interval,
    segments,
    shift_interval,
)

DECILES = tuple(range(0, 101, 10))  # percentiles kept of each distribution compared
# Precedence when one metric has several strata: the worst decides.
_PRECEDENCE = (
    MetricOutcome.WORSE,
    MetricOutcome.ENVIRONMENTAL,
    MetricOutcome.NO_DATA,
    MetricOutcome.PASSED,
    MetricOutcome.NOT_REPORTED,
)


@dataclass(frozen=True)
class NodeValues:
    """Per metric of the policy and phase: node codes and their aggregated values."""

    node: Ints
    value: Floats


def node_values(
    table: SampleTable, policy: Policy, *, now: float
) -> dict[tuple[str, bool], NodeValues]:
    """(metric name, baseline?) -> one value per node with enough samples (steps 1 and 2)."""
    defs = policy.metrics
    of_code = np.full(len(table.metrics) + 1, -1, dtype=np.int64)
    for i, m in enumerate(defs):
        code = table.metric_code(m.name)
        if code is not None:
            of_code[code] = i
    which = of_code[table.metric] if table.rows else np.zeros(0, dtype=np.int64)
    keep = (which >= 0) & (table.time <= now)
    value = table.value.copy()
    missing = ~np.isfinite(value)
    zero = np.array([m.missing is MissingRule.ZERO for m in defs])
    value[missing & zero[np.maximum(which, 0)]] = 0.0
    keep &= np.isfinite(value)
    idx = np.flatnonzero(keep)
    n_nodes = max(len(table.nodes), 1)
    if len(idx) == 0:
        empty = NodeValues(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64))
        return {(m.name, b): empty for m in defs for b in (False, True)}
    key = (which[idx] * 2 + table.baseline[idx]) * n_nodes + table.node[idx]
    order = np.lexsort((value[idx], key))
    key, sorted_values = key[order], value[idx][order]
    starts, counts = segments(key)
    seg_key = key[starts]
    seg_def = seg_key // (2 * n_nodes)
    aggregated = aggregate_segments(
        sorted_values,
        starts,
        counts,
        remove_outliers=np.array([m.outliers is Outliers.REMOVE for m in defs])[seg_def],
        use_mean=np.array([m.aggregate is Aggregate.MEAN for m in defs])[seg_def],
        iqr_factor=policy.iqr_factor,
    )
    enough = counts >= policy.minimum.samples_per_node
    out: dict[tuple[str, bool], NodeValues] = {}
    for i, m in enumerate(defs):
        for baseline in (False, True):
            sel = enough & (seg_key // n_nodes == i * 2 + baseline)
            out[m.name, baseline] = NodeValues(seg_key[sel] % n_nodes, aggregated[sel])
    return out


def _beyond(metric: MetricDefinition, shift_low: float, shift_high: float, floor: float) -> bool:
    """The whole interval lies beyond the floor in the harmful direction."""
    if metric.harmful is Harmful.LOWER:
        return shift_high < -floor
    return shift_low > floor


def _degraded_vs_baseline(
    metric: MetricDefinition, now: Floats, before: Floats, confidence: float
) -> bool:
    shift = shift_interval(now, before, confidence)
    if shift is None:
        return False
    return _beyond(metric, shift.low, shift.high, metric.floor_at(float(np.median(before))))


def _degraded_vs_expected(
    metric: MetricDefinition, values: Floats, expected: float, confidence: float
) -> bool:
    interval = median_interval(values, confidence)
    if interval is None:
        return False
    _, low, high = interval
    return _beyond(metric, low - expected, high - expected, metric.floor_at(expected))


def _environment(
    metric: MetricDefinition,
    policy: Policy,
    canary: Floats,
    control: Floats,
    baseline: tuple[Floats, Floats],
    expected: float | None,
) -> Environment | None:
    base_canary, base_control = baseline
    minimum = policy.minimum
    if len(base_canary) >= minimum.canary_nodes and len(base_control) >= minimum.control_nodes:
        canary_bad = _degraded_vs_baseline(metric, canary, base_canary, policy.confidence)
        control_bad = _degraded_vs_baseline(metric, control, base_control, policy.confidence)
        reference = "baseline"
    elif expected is not None:
        canary_bad = _degraded_vs_expected(metric, canary, expected, policy.confidence)
        control_bad = _degraded_vs_expected(metric, control, expected, policy.confidence)
        reference = f"expected {expected:g}"
    else:
        return None
    words = {True: "degraded", False: "not degraded"}
    return Environment(
        reference=reference.split()[0],
        canary_degraded=canary_bad,
        control_degraded=control_bad,
        detail=f"vs {reference}: canary {words[canary_bad]}, control {words[control_bad]}",
    )


def _describe(c: Comparison) -> str:
    p = "n/a" if c.p_value is None else f"{c.p_value:.3g}"
    return (
        f"canary {c.canary_nodes} node(s) median {c.canary_median:.4g} vs control "
        f"{c.control_nodes} median {c.control_median:.4g}: shift {c.shift:.4g} "
        f"[{c.low:.4g}, {c.high:.4g}], floor {c.floor:.4g}, p={p}"
    )


@dataclass(frozen=True)
class _Stratum:
    name: str
    canary: NodeValues
    control: NodeValues
    baseline: tuple[Floats, Floats]


def _deciles(values: Floats) -> tuple[float, ...]:
    """The 0th, 10th, ..., 100th percentiles of one value per node (``Comparison``)."""
    return tuple(float(q) for q in np.percentile(values, DECILES))


def judge_metric(
    metric: MetricDefinition,
    policy: Policy,
    table: SampleTable,
    stratum: _Stratum,
    *,
    reported: bool = True,
) -> MetricJudgement:
    """One metric in one stratum (steps 3 and 4)."""

    def made(outcome: MetricOutcome, detail: str, **evidence: object) -> MetricJudgement:
        return MetricJudgement.model_validate(
            {
                "metric": metric.name,
                "stratum": stratum.name,
                "critical": metric.critical,
                "weight": metric.weight,
                "outcome": outcome,
                "detail": detail,
                **evidence,
            }
        )

    canary, control = stratum.canary.value, stratum.control.value
    need = policy.minimum
    if not reported and not metric.required:
        return made(
            MetricOutcome.NOT_REPORTED,
            "not judged: no node, canary or control, reported this metric",
        )
    if len(canary) == 0 and len(control) == 0:
        return made(MetricOutcome.NO_DATA, "too little data: no usable samples of this metric")
    if len(canary) < need.canary_nodes or len(control) < need.control_nodes:
        return made(
            MetricOutcome.NO_DATA,
            f"too little data: canary {len(canary)} node(s) (need {need.canary_nodes}), "
            f"control {len(control)} (need {need.control_nodes}) with "
            f">= {need.samples_per_node} sample(s) each",
        )
    shift: Shift | None = shift_interval(canary, control, policy.confidence)
    if shift is None:
        return made(MetricOutcome.NO_DATA, f"too few nodes for a {policy.confidence:.0%} interval")
    control_median = float(np.median(control))
    floor = metric.floor_at(control_median)
    comparison = Comparison(
        canary_nodes=len(canary),
        control_nodes=len(control),
        canary_median=float(np.median(canary)),
        control_median=control_median,
        shift=shift.estimate,
        low=shift.low,
        high=shift.high,
        floor=floor,
        p_value=mann_whitney_p(canary, control),
        canary_deciles=_deciles(canary),
        control_deciles=_deciles(control),
    )
    expected = policy.expected.get(stratum.name, {}).get(metric.name)
    env = _environment(metric, policy, canary, control, stratum.baseline, expected)
    detail = _describe(comparison)
    if env is not None:
        detail += f"; {env.detail}"
    if env is not None and env.canary_degraded and env.control_degraded:
        outcome = MetricOutcome.ENVIRONMENTAL
    elif _beyond(metric, shift.low, shift.high, floor):
        outcome = MetricOutcome.WORSE
    else:
        outcome = MetricOutcome.PASSED
    offending: tuple[str, ...] = ()
    if outcome is MetricOutcome.WORSE:
        sign = -1.0 if metric.harmful is Harmful.LOWER else 1.0
        bad = sign * (canary - control_median) > floor
        offending = tuple(sorted(table.nodes[int(n)] for n in stratum.canary.node[bad]))
    return made(outcome, detail, comparison=comparison, environment=env, offending_nodes=offending)


def _split(values: NodeValues, table: SampleTable, stratum: int, canary: bool) -> NodeValues:
    sel = (table.node_stratum[values.node] == stratum) & (table.node_canary[values.node] == canary)
    return NodeValues(values.node[sel], values.value[sel])


def _reported(table: SampleTable, now: float) -> set[tuple[int, int]]:
    """(metric code, stratum) of every metric some node of the stratum reported up to ``now``."""
    if not table.rows:
        return set()
    seen = table.time <= now
    pairs = zip(table.metric[seen], table.node_stratum[table.node[seen]], strict=True)
    return {(int(m), int(s)) for m, s in set(pairs)}


def judge_metrics(table: SampleTable, policy: Policy, *, now: float) -> tuple[MetricJudgement, ...]:
    """Every metric of the policy in every stratum that has canary nodes."""
    values = node_values(table, policy, now=now)
    reported = _reported(table, now)
    live = np.unique(table.node[table.time <= now]) if table.rows else np.zeros(0, np.int64)
    canary_strata = sorted(
        {int(s) for s in table.node_stratum[live[table.node_canary[live]]]},
        key=lambda s: table.strata[s],
    )
    out: list[MetricJudgement] = []
    for metric in policy.metrics:
        if not canary_strata:
            out.append(
                MetricJudgement(
                    metric=metric.name,
                    stratum=DEFAULT_STRATUM,
                    outcome=MetricOutcome.NO_DATA,
                    critical=metric.critical,
                    weight=metric.weight,
                    detail="too little data: no canary samples",
                )
            )
            continue
        soak, before = values[metric.name, False], values[metric.name, True]
        for s in canary_strata:
            stratum = _Stratum(
                name=table.strata[s],
                canary=_split(soak, table, s, canary=True),
                control=_split(soak, table, s, canary=False),
                baseline=(
                    _split(before, table, s, canary=True).value,
                    _split(before, table, s, canary=False).value,
                ),
            )
            code = table.metric_code(metric.name)
            heard = code is not None and (code, s) in reported
            out.append(judge_metric(metric, policy, table, stratum, reported=heard))
    return tuple(out)


def _worst(outcomes: Sequence[MetricOutcome]) -> MetricOutcome:
    return min(outcomes, key=_PRECEDENCE.index)


def decide(
    policy: Policy,
    metrics: Sequence[MetricJudgement],
    rules: Sequence[RuleFinding],
    *,
    notes: Sequence[str] = (),
    evaluated_at: float,
) -> GateDecision:
    """Combine metric judgements and hard-rule findings into the verdict (step 5)."""
    per_metric = {
        m.name: _worst(
            [j.outcome for j in metrics if j.metric == m.name] or [MetricOutcome.NO_DATA]
        )
        for m in policy.metrics
    }
    # Only the metrics that were reported are judged and scored; the others are named.
    unjudged = [n for n, o in per_metric.items() if o is MetricOutcome.NOT_REPORTED]
    judged = [m for m in policy.metrics if per_metric[m.name] is not MetricOutcome.NOT_REPORTED]
    total = sum(m.weight for m in judged) or 1.0
    worse = [m for m in policy.metrics if per_metric[m.name] is MetricOutcome.WORSE]
    score = round(100.0 * (1 - sum(m.weight for m in worse) / total), 6)
    tripping = [r for r in rules if not r.environmental]
    critical = [m.name for m in worse if m.critical]
    names = ", ".join(m.name for m in worse)

    trip_reasons = [
        f"hard rule {r.rule} broken on {len(r.nodes)} canary node(s) in {r.stratum}"
        for r in tripping
    ]
    trip_reasons += [f"critical metric {name} worse than control" for name in critical]
    if score < policy.marginal_score:
        trip_reasons.append(f"score {score:g} below marginal {policy.marginal_score:g} ({names})")
    if trip_reasons:
        offending = {n for r in tripping for n in r.nodes}
        offending |= {
            n for j in metrics if j.outcome is MetricOutcome.WORSE for n in j.offending_nodes
        }
        return GateDecision(
            verdict=GateVerdict.TRIPPED,
            reason="; ".join(trip_reasons),
            score=score,
            metrics=tuple(metrics),
            rules=tuple(rules),
            offending_nodes=tuple(sorted(offending)),
            notes=tuple(notes),
            evaluated_at=evaluated_at,
        )

    held = [
        f"environmental: hard rule {r.rule} broken by {r.control_hits} of {r.control_nodes} "
        f"control node(s) in {r.stratum} as well"
        for r in rules
        if r.environmental
    ]
    env = [n for n, o in per_metric.items() if o is MetricOutcome.ENVIRONMENTAL]
    if env:
        held.append(f"environmental: control degraded like the canary in {', '.join(env)}")
    nodata = [n for n, o in per_metric.items() if o is MetricOutcome.NO_DATA]
    if nodata:
        held.append(f"too little data for {', '.join(nodata)}")
    if score < policy.pass_score:
        held.append(f"score {score:g} below pass {policy.pass_score:g} ({names})")
    if not judged:
        held.append("too little data: no metric of the policy was reported")
    passed = "every reported metric within its floor and no hard rule broken"
    reason = "; ".join(held) or passed
    if unjudged:
        reason += f"; not judged (no node reported them): {', '.join(unjudged)}"
    return GateDecision(
        verdict=GateVerdict.INCONCLUSIVE if held else GateVerdict.PASSED,
        reason=reason,
        score=score,
        metrics=tuple(metrics),
        rules=tuple(rules),
        offending_nodes=(),
        notes=tuple(notes),
        evaluated_at=evaluated_at,
    )


def evaluate(
    table: SampleTable, policy: Policy, *, now: datetime, roster: Collection[str] = ()
) -> GateDecision:
    """The whole gate on the samples up to ``now``; ``roster`` lists the wave's canary nodes
    (one that sent nothing at all is silent, which the heartbeat rule catches)."""
    at = now.timestamp()
    metrics = judge_metrics(table, policy, now=at)
    # A busbw drop the environmental check saw in both groups also explains canary nodes under
    # the busbw bar, unless the canary is under it significantly more often.
    degraded = {
        HardRule.BUSBW: {
            j.stratum
            for j in metrics
            if j.metric == BUSBW and j.outcome is MetricOutcome.ENVIRONMENTAL
        }
    }
    rules, notes = check_hard_rules(table, policy, now=at, roster=roster, degraded=degraded)
    return decide(policy, metrics, rules, notes=notes, evaluated_at=at)


def trip_evidence(
    table: SampleTable,
    policy: Policy,
    *,
    now: float,
    window_start: float,
    baseline: tuple[float, float] | None = None,
) -> TripEvidence:
    """The judge's comparison (``judge_metrics``, exactly what ``evaluate`` runs) as of ``now``
    over ``table``, the samples of the window ``[window_start, now]`` (and ``baseline``'s), for
    a verdict a hard rule decided: evidence kept beside that verdict, never deciding it."""
    return TripEvidence(
        window_start=window_start,
        window_end=now,
        baseline_start=None if baseline is None else baseline[0],
        baseline_end=None if baseline is None else baseline[1],
        metrics=judge_metrics(table, policy, now=now),
    )
