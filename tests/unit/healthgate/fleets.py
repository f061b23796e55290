"""Small hand-made sample tables for the judge's tests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

import numpy as np

from lockstep_gate.policy import MetricDefinition, Policy
from lockstep_gate.samples import DEFAULT_STRATUM, Group, Phase, Sample, SampleTable

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
STEP = 10.0
BUSBW = MetricDefinition.model_validate(
    {"name": "nccl_busbw_gbps", "harmful": "lower", "floor": 0.02, "critical": True, "weight": 3}
)
TEMP = MetricDefinition.model_validate(
    {"name": "gpu_temperature_c", "harmful": "higher", "floor": 3.0, "floor_kind": "absolute"}
)
XIDS = MetricDefinition.model_validate(
    {
        "name": "xid_nonfatal_count",
        "harmful": "higher",
        "floor": 0.05,
        "floor_kind": "absolute",
        "missing": "zero",
        "aggregate": "mean",
        "outliers": "keep",
    }
)


def policy(*metrics: MetricDefinition, **settings: object) -> Policy:
    """A policy of these metrics (busbw alone by default) with small minimums."""
    return Policy.model_validate(
        {
            "metrics": [m.model_dump() for m in (metrics or (BUSBW,))],
            "minimum": {"canary_nodes": 5, "control_nodes": 5, "samples_per_node": 3},
            **settings,
        }
    )


def at(seconds: float) -> datetime:
    """Seconds since the epoch as an aware datetime."""
    return datetime.fromtimestamp(seconds, UTC)


def series(
    group: Group,
    metric: str,
    per_node: Sequence[Sequence[float]],
    *,
    prefix: str | None = None,
    stratum: str = DEFAULT_STRATUM,
    phase: Phase = Phase.SOAK,
    start: float = T0,
) -> list[Sample]:
    """Rows of one metric: node i of the group reports ``per_node[i]``, one value per STEP."""
    name = prefix or str(group)
    return [
        Sample(f"{name}-{i:03d}", group, metric, float(v), start + j * STEP, stratum, phase)
        for i, values in enumerate(per_node)
        for j, v in enumerate(values)
    ]


def normal_nodes(
    rng: np.random.Generator,
    nodes: int,
    center: float,
    *,
    node_sd: float,
    sample_sd: float,
    per: int = 5,
) -> list[list[float]]:
    """Per-node series: a persistent node level plus noise per sample."""
    levels = center + node_sd * rng.standard_normal(nodes)
    return [list(level + sample_sd * rng.standard_normal(per)) for level in levels]


def fleet(
    metrics: Mapping[str, tuple[Sequence[Sequence[float]], Sequence[Sequence[float]]]],
    *,
    extra: Sequence[Sample] = (),
) -> SampleTable:
    """A table from, per metric, (canary series, control series)."""
    rows: list[Sample] = []
    for metric, (canary, control) in metrics.items():
        rows += series(Group.CANARY, metric, canary)
        rows += series(Group.CONTROL, metric, control)
    return SampleTable.from_rows([*rows, *extra])


def end(table: SampleTable) -> datetime:
    """The time of the table's last sample."""
    return at(float(table.time.max()))
