"""A decision as the ``gate.*`` event that carries it (``GatePassed`` / ``GateTripped`` /
``GateInconclusive``), within the events' bounds."""

from __future__ import annotations

from lockstep_common.events.v1 import (
    MAX_ITEMS,
    MAX_NODES,
    GateInconclusive,
    GatePassed,
    GateTripped,
    MetricEvidence,
)
from lockstep_common.vocabulary import GateVerdict, clip_text
from lockstep_gate.decision import GateDecision, MetricJudgement, MetricOutcome
from lockstep_gate.samples import DEFAULT_STRATUM

GateEvent = GatePassed | GateTripped | GateInconclusive
_EVENT: dict[GateVerdict, type[GateEvent]] = {
    GateVerdict.PASSED: GatePassed,
    GateVerdict.TRIPPED: GateTripped,
    GateVerdict.INCONCLUSIVE: GateInconclusive,
}
NAME_MAX = 256


def _name(metric: str, stratum: str) -> str:
    return (metric if stratum == DEFAULT_STRATUM else f"{metric}[{stratum}]")[:NAME_MAX]


def _metric(j: MetricJudgement) -> MetricEvidence:
    c = j.comparison
    return MetricEvidence(
        metric=_name(j.metric, j.stratum),
        treatment=None if c is None else c.canary_median,
        control=None if c is None else c.control_median,
        p_value=None if c is None else c.p_value,
        passed=j.outcome is MetricOutcome.PASSED,
        detail=clip_text(f"{j.outcome}: {j.detail}"),
    )


def event_evidence(decision: GateDecision) -> tuple[MetricEvidence, ...]:
    """Hard-rule findings, then metrics, failing ones first; at most ``MAX_ITEMS``."""
    rules = [
        MetricEvidence(
            metric=_name(str(r.rule), r.stratum),
            treatment=len(r.nodes) / r.canary_nodes if r.canary_nodes else None,
            control=r.control_hits / r.control_nodes if r.control_nodes else None,
            p_value=r.p_value,
            passed=False,
            detail=clip_text(
                f"{'environmental' if r.environmental else 'broken'} (share of nodes): {r.detail}"
            ),
        )
        for r in decision.rules
    ]
    metrics = sorted(
        (_metric(j) for j in decision.metrics), key=lambda e: e.passed
    )  # stable: policy order within passed and not passed
    return tuple([*rules, *metrics][:MAX_ITEMS])


def gate_event(decision: GateDecision, *, rollout_id: str, wave: int) -> GateEvent:
    """The event announcing ``decision`` for a rollout's wave."""
    return _EVENT[decision.verdict](
        rollout_id=rollout_id,
        wave=wave,
        verdict=decision.verdict,
        evidence=event_evidence(decision),
        offending_nodes=decision.offending_nodes[:MAX_NODES],
    )
