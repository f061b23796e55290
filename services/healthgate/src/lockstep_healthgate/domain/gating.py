"""When a wave's gate decides: at once on a hard rule, or at the end of its soak.

Both are functions of the samples, the policy and the time, so a persisted verdict can be
re-derived from its stored samples (``lockstep gate show`` prints what it rests on).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from datetime import UTC, datetime

from lockstep_gate.decision import GateDecision
from lockstep_gate.hard_rules import NO_HEARTBEATS, check_hard_rules
from lockstep_gate.judge import decide, evaluate, trip_evidence
from lockstep_gate.policy import Policy
from lockstep_gate.samples import SampleTable

INSTANT_NOTE = (
    "decided by a hard rule before the soak ended: the metrics did not decide it "
    "(their comparison as of the trip is kept as evidence only)"
)


def instant_decision(
    table: SampleTable,
    policy: Policy,
    *,
    now: float,
    roster: Collection[str] | Mapping[str, str] = (),
) -> GateDecision | None:
    """A trip when a canary node breaks a hard rule that the control does not explain; else
    None (an environmental finding waits for the soak's judge, which asks a human).
    ``roster``: canary nodes that must have reported (a silent one breaks the heartbeat rule)."""
    rules, notes = check_hard_rules(table, policy, now=now, roster=roster)
    if not any(not r.environmental for r in rules):
        return None
    # At ingest the heartbeats are left out on purpose (the soak's watch has them): not news.
    kept = tuple(n for n in notes if n != NO_HEARTBEATS)
    return decide(policy, (), rules, notes=(INSTANT_NOTE, *kept), evaluated_at=now)


def with_trip_evidence(
    decision: GateDecision,
    table: SampleTable,
    policy: Policy,
    *,
    window_start: float,
    baseline: tuple[float, float] | None,
) -> GateDecision:
    """``decision`` (a hard rule's trip) with the judge's comparison over ``table`` as of the
    trip (``decision.evaluated_at``) kept as ``at_trip``: what the canary's metrics looked like
    against the control's then. Only that field changes: verdict, reason, score, rules and
    offending nodes stay the hard rule's."""
    evidence = trip_evidence(
        table, policy, now=decision.evaluated_at, window_start=window_start, baseline=baseline
    )
    return decision.model_copy(update={"at_trip": evidence})


def soak_decision(
    table: SampleTable, policy: Policy, *, due_at: datetime, roster: Collection[str]
) -> GateDecision:
    """The whole judge as of the end of the soak; ``roster``: the wave's canary nodes."""
    return evaluate(table, policy, now=due_at.astimezone(UTC), roster=roster)
