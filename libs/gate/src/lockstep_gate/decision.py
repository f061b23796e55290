"""What the judge decides and why: the verdict with per-metric and per-rule evidence."""

from __future__ import annotations

import enum

from pydantic import BaseModel, ConfigDict

from lockstep_common.vocabulary import GateVerdict


class _Result(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MetricOutcome(enum.StrEnum):
    """One metric in one stratum."""

    PASSED = "passed"  # no shift beyond the floor in the harmful direction
    WORSE = "worse"  # the whole interval lies beyond the floor in the harmful direction
    NO_DATA = "no_data"  # too few nodes or samples: never a pass
    ENVIRONMENTAL = "environmental"  # control degraded like the canary: not the rollout's doing
    # No node, canary or control, reported it: nothing to judge, and nothing against the update
    # (a metric the canary stopped reporting while the control did not is NO_DATA).
    NOT_REPORTED = "not_reported"


class HardRule(enum.StrEnum):
    """Rules that trip at once (design.md, healthgate; seeds 001 and 003)."""

    DCGM_DIAG = "dcgm_diag_failed"
    FATAL_XID = "fatal_xid"
    BUSBW = "busbw_below_expected"
    HEARTBEAT = "heartbeat_missing"
    GSP_INIT = "gsp_init_failed"
    DEVICE_FAILED = "device_failed"


# A fleet-wide network problem breaks these on control nodes too; the others are faults of the
# node itself (and on an updated node, suspect), so they trip whatever the control shows.
ENVIRONMENT_SENSITIVE = frozenset({HardRule.BUSBW, HardRule.HEARTBEAT})


class Comparison(_Result):
    """Canary against control over the same window, one value per node."""

    canary_nodes: int
    control_nodes: int
    canary_median: float
    control_median: float
    shift: float  # Hodges-Lehmann estimate of canary - control
    low: float  # interval of the shift at the policy's confidence
    high: float
    floor: float  # effect-size floor in the metric's unit (the harmful side's magnitude)
    p_value: float | None  # two-sided Mann-Whitney U
    # The distributions compared, as the 0th, 10th, ..., 100th percentiles of the per-node
    # values (numpy's linear interpolation): a fixed size whatever the stratum's node count,
    # so a verdict stays small on the bus, and what `gate show` and the console plot is what
    # the judge saw. Empty in a decision recorded before they were kept.
    canary_deciles: tuple[float, ...] = ()
    control_deciles: tuple[float, ...] = ()


class Environment(_Result):
    """Each group against its own reference (baseline samples or the policy's expected value)."""

    reference: str  # "baseline" or "expected"
    canary_degraded: bool
    control_degraded: bool
    detail: str


class MetricJudgement(_Result):
    """One metric in one stratum."""

    metric: str
    stratum: str
    outcome: MetricOutcome
    critical: bool
    weight: float
    comparison: Comparison | None = None
    environment: Environment | None = None
    offending_nodes: tuple[str, ...] = ()
    detail: str


class RuleHit(_Result):
    """One canary node breaking a hard rule: the reading that broke it, the rule's threshold and
    the time of that reading, so a timeline of hits is drawn from what the rule saw, never from
    a second reading of the samples.

    What ``value`` and ``threshold`` hold per rule: ``dcgm_diag_failed`` the result (0 failed)
    against 1 (passed); ``fatal_xid``, ``gsp_init_failed`` and ``device_failed`` the reading
    against 0 (any positive value trips); ``busbw_below_expected`` the first reading of the run
    below the bar against the bar (``busbw_factor`` x expected, GB/s); ``heartbeat_missing``
    the silence in seconds against the limit, ``at`` when the silence began (``value`` None:
    the node sent no sample at all, ``at`` the time it was judged)."""

    node: str
    at: float  # seconds since the epoch
    value: float | None
    threshold: float
    detail: str


class RuleFinding(_Result):
    """A hard rule broken by canary nodes of one stratum."""

    rule: HardRule
    stratum: str
    nodes: tuple[str, ...]  # canary nodes breaking it
    canary_nodes: int
    control_hits: int
    control_nodes: int
    environmental: bool  # the control breaks it about as often: not blamed on the rollout
    p_value: float | None  # one-sided Fisher exact, when the control breaks it too
    detail: str
    # One per node of ``nodes``, in time order (``detail`` shows five). Empty in a decision
    # recorded before hits were kept.
    hits: tuple[RuleHit, ...] = ()


AT_TRIP_LABEL = (
    "evidence at trip time: the judge's comparison over the window so far, when a hard rule "
    "decided the verdict; it did not decide it (the hard rule did)"
)


class TripEvidence(_Result):
    """What the judge's comparison showed when a hard rule decided a wave before its soak
    ended: the same per-metric judgements the soak's judge makes (``judge.judge_metrics``),
    over the wave's samples so far. Evidence for the person on call, never part of the verdict:
    the verdict, its reason, score and offending nodes are the hard rule's. A metric with too
    few nodes or samples by then is ``no_data`` (or ``not_reported``), never a made-up
    comparison."""

    label: str = AT_TRIP_LABEL
    window_start: float  # seconds since the epoch: the samples compared, start ..
    window_end: float  # .. the trip (the judge's ``now``)
    baseline_start: float | None = None  # the environmental check's baseline, when read
    baseline_end: float | None = None
    metrics: tuple[MetricJudgement, ...]


class GateDecision(_Result):
    """The verdict, deterministic in the samples, the policy and ``evaluated_at``."""

    verdict: GateVerdict
    reason: str
    score: float  # 100 x (1 - weight of worse metrics / total weight), as Kayenta scores
    metrics: tuple[MetricJudgement, ...]
    rules: tuple[RuleFinding, ...]
    offending_nodes: tuple[str, ...]
    notes: tuple[str, ...] = ()
    evaluated_at: float  # seconds since the epoch: samples after it were not considered
    # A hard-rule trip's evidence from the judge's comparison at that moment (None: a verdict
    # of the soak's judge, or recorded before it was kept). Never read by the verdict.
    at_trip: TripEvidence | None = None
