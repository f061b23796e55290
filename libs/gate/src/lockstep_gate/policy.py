"""The gate policy: which metrics are compared, how, and which hard rules trip at once.

Policy is data (issue 11): an operator edits a TOML file (the packaged default is
``lockstep_gate/data/default_policy.toml``); this module only validates it. The knobs follow
Kayenta's NetflixACAJudge (peers.md section 10): per metric a direction, an effect-size floor, a
``critical`` flag, a weight, a missing-value rule (``remove``/``replace`` there, ``remove``/``zero``
here) and an outlier strategy (``remove`` by IQR fences, or ``keep``); a 98% interval; a score with
``pass`` and ``marginal`` thresholds. The hard rules come from seed 001 (DCGM diagnostics, the ~92%
busbw acceptance gate, fatal XIDs) and seed 003 (heartbeats).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

MetricName = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{0,63}$")]
StratumName = Annotated[str, Field(min_length=1, max_length=128)]
# The XIDs seed 001 and the issue name as fatal: 48 double-bit ECC, 63/64 row remapping recorded /
# failed, 74 NVLink error, 79 fallen off the bus, 92 high single-bit ECC rate, 94/95 contained /
# uncontained ECC error.
DEFAULT_FATAL_XIDS = (48, 63, 64, 74, 79, 92, 94, 95)


class PolicyError(ValueError):
    """The policy is not valid; the message is one line naming what is wrong."""


class Harmful(enum.StrEnum):
    """Which direction of change hurts."""

    HIGHER = "higher"
    LOWER = "lower"


class FloorKind(enum.StrEnum):
    """How the effect-size floor is expressed."""

    RELATIVE = "relative"  # a fraction of the reference (control or baseline median)
    ABSOLUTE = "absolute"  # in the metric's own unit


class MissingRule(enum.StrEnum):
    """What a missing value (null, NaN, infinity) becomes."""

    REMOVE = "remove"  # dropped: a gauge that was not read says nothing
    ZERO = "zero"  # 0: a counter with nothing to report


class Aggregate(enum.StrEnum):
    """How one node's samples in the window become the node's value."""

    MEDIAN = "median"  # gauges: robust to one odd reading
    MEAN = "mean"  # counters and shares: the rate per report; a median would hide them


class Outliers(enum.StrEnum):
    """Outlier strategy within a node's series before it is aggregated."""

    REMOVE = "remove"  # drop samples outside the IQR fences
    KEEP = "keep"  # counters: with mostly zeros the IQR is 0 and every event would be dropped


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class MetricDefinition(_Model):
    """One metric compared between the canary and the concurrent control."""

    name: MetricName = Field(description="Metric name as it appears in the samples.")
    harmful: Harmful = Field(description="higher or lower is harmful.")
    floor: float = Field(ge=0, description="Effect-size floor: smaller shifts never count.")
    floor_kind: FloorKind = Field(default=FloorKind.RELATIVE, description="relative or absolute.")
    critical: bool = Field(default=False, description="Worse alone trips the gate.")
    required: bool = Field(
        default=False,
        description="Nobody reporting it holds the gate (too little data); otherwise a metric "
        "no node reported is named and left unjudged.",
    )
    weight: float = Field(default=1.0, gt=0, le=1000, description="Weight in the score.")
    missing: MissingRule = Field(default=MissingRule.REMOVE, description="remove or zero.")
    aggregate: Aggregate = Field(default=Aggregate.MEDIAN, description="Per-node aggregate.")
    outliers: Outliers = Field(default=Outliers.REMOVE, description="remove (IQR) or keep.")
    description: str = Field(default="", max_length=1024, description="What it measures.")

    @model_validator(mode="after")
    def _relative_floor_below_one(self) -> MetricDefinition:
        if self.floor_kind is FloorKind.RELATIVE and self.floor >= 1:
            raise ValueError(f"metric {self.name}: a relative floor must be below 1")
        return self

    def floor_at(self, reference: float) -> float:
        """The floor in the metric's unit, for a reference level (a median)."""
        if self.floor_kind is FloorKind.ABSOLUTE:
            return self.floor
        return self.floor * abs(reference)


class Minimums(_Model):
    """Below these there is too little data, and too little data is never a pass."""

    canary_nodes: int = Field(default=5, ge=3, le=100_000, description="Per stratum.")
    control_nodes: int = Field(default=10, ge=3, le=100_000, description="Per stratum.")
    samples_per_node: int = Field(default=3, ge=1, le=100_000, description="In the window.")


class HardRules(_Model):
    """Rules that trip at once, without waiting for the soak."""

    fatal_xids: tuple[Annotated[int, Field(ge=0, le=9999)], ...] = Field(
        default=DEFAULT_FATAL_XIDS, max_length=256, description="Any of these XIDs trips."
    )
    busbw_factor: float = Field(
        default=0.92, gt=0, le=1, description="busbw below expected x this trips (seed 001)."
    )
    busbw_consecutive: int = Field(
        default=2,
        ge=1,
        le=1000,
        description="Consecutive busbw samples below the bar needed: one all_reduce run can "
        "collide with other traffic on a shared fabric.",
    )
    heartbeat_interval_s: float = Field(default=10.0, gt=0, le=86_400, description="Cadence.")
    heartbeat_missed_intervals: int = Field(
        default=3, ge=1, le=10_000, description="Silence longer than this many intervals trips."
    )
    environmental_control_fraction: float = Field(
        default=0.05,
        gt=0,
        le=1,
        description="When at least this share of control nodes breaks the busbw or heartbeat "
        "rule too, the environment is suspect: the canary trips only if it breaks the rule "
        "significantly more often (one-sided Fisher exact test).",
    )
    environmental_alpha: float = Field(
        default=0.001,
        gt=0,
        lt=0.5,
        description="Significance the canary's excess must reach to trip in a suspect "
        "environment. Strict on purpose: the alternative is an inconclusive gate, which holds "
        "the rollout too, while a trip blames it.",
    )


class Policy(_Model):
    """The whole gate policy."""

    confidence: float = Field(
        default=0.98, gt=0.5, lt=1, description="Two-sided confidence of the intervals (Kayenta)."
    )
    iqr_factor: float = Field(
        default=3.0, gt=0, le=100, description="IQR fence factor (Kayenta's loosened 3.0)."
    )
    pass_score: float = Field(default=100.0, ge=0, le=100, description="Score needed to pass.")
    marginal_score: float = Field(
        default=75.0, ge=0, le=100, description="Below this score the gate trips."
    )
    minimum: Minimums = Field(default_factory=Minimums, description="Minimum sample sizes.")
    hard_rules: HardRules = Field(default_factory=HardRules, description="Rules that trip at once.")
    metrics: tuple[MetricDefinition, ...] = Field(
        min_length=1, max_length=256, description="Metrics compared, in report order."
    )
    expected: dict[StratumName, dict[MetricName, float]] = Field(
        default_factory=dict,
        description="Per stratum (hardware profile), metric -> the value a healthy node shows: "
        "the busbw rule's bar, and the reference for the environmental check when the samples "
        "carry no baseline.",
    )

    @field_validator("expected")
    @classmethod
    def _expected_positive(cls, value: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
        for stratum, by_metric in value.items():
            for metric, level in by_metric.items():
                if not (math.isfinite(level) and level > 0):
                    raise ValueError(f"expected.{stratum}.{metric} must be a positive number")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Policy:
        names = [m.name for m in self.metrics]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"metric defined twice: {', '.join(duplicates)}")
        if self.marginal_score > self.pass_score:
            raise ValueError("marginal_score must not exceed pass_score")
        return self

    def metric(self, name: str) -> MetricDefinition:
        """The definition of a metric by name (KeyError if absent)."""
        for m in self.metrics:
            if m.name == name:
                return m
        raise KeyError(name)


def parse_policy(data: Mapping[str, Any], *, origin: str = "policy") -> Policy:
    """Validate a decoded policy document; :class:`PolicyError` names the first problem."""
    try:
        return Policy.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        message = str(first["msg"]).removeprefix("Value error, ")
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise PolicyError(f"{origin}: {where + ': ' if where else ''}{message}{more}") from None
