"""Synthetic fleets for tests and ``lockstep bench gate``: health samples of a canary and a control
group, with the degradations a bad image or a fleet-wide problem would cause.

Each metric has a per-node level (nodes differ persistently: a slightly slower rail, a warmer
rack) and per-sample noise around it. Gauges are normal; counters Poisson; shares Bernoulli. The
levels are plausible for an HGX/GB200 node on a 400G fabric (seed 001: ~370 GB/s busbw expected).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from lockstep_gate.hard_rules import HEARTBEAT
from lockstep_gate.samples import DEFAULT_STRATUM, SampleTable

START = 1_767_225_600.0  # 2026-01-01T00:00:00Z: the soak window starts here
INTERVAL = 10.0  # seconds between reports (the design load's cadence)
EXPECTED_BUSBW = 370.0


class Kind(enum.StrEnum):
    """Distribution of a metric's samples."""

    NORMAL = "normal"  # gauge: level x (1 + sample_sd x N(0, 1))
    POISSON = "poisson"  # counter per report, rate = level
    BERNOULLI = "bernoulli"  # share: 1 with probability level


@dataclass(frozen=True)
class MetricModel:
    """How one metric behaves on a healthy fleet."""

    name: str
    kind: Kind
    center: float  # fleet-wide mean level (rate or probability for counters and shares)
    node_sd: float = 0.0  # relative spread of node levels (gauges)
    sample_sd: float = 0.0  # relative per-sample noise (gauges)


FLEET: tuple[MetricModel, ...] = (
    MetricModel("nccl_busbw_gbps", Kind.NORMAL, EXPECTED_BUSBW * 1.02, 0.02, 0.01),
    MetricModel("sm_clock_mhz", Kind.NORMAL, 1980.0, 0.01, 0.005),
    MetricModel("gpu_temperature_c", Kind.NORMAL, 62.0, 0.04, 0.02),
    MetricModel("gpu_power_w", Kind.NORMAL, 640.0, 0.03, 0.02),
    MetricModel("throttled", Kind.BERNOULLI, 0.02),
    MetricModel("xid_nonfatal_count", Kind.POISSON, 0.002),
    MetricModel("ecc_sbe_count", Kind.POISSON, 0.05),
    MetricModel("row_remap_pending", Kind.POISSON, 0.0005),
    MetricModel("pcie_replay_count", Kind.POISSON, 0.1),
    MetricModel("nvlink_crc_error_count", Kind.POISSON, 0.2),
)


@dataclass(frozen=True)
class Scenario:
    """Who is degraded by how much: multiplicative factors on a metric's level."""

    canary: int = 50
    control: int = 500
    samples_per_node: int = 10
    canary_effect: Mapping[str, float] = field(default_factory=dict)  # the rollout's doing
    fleet_effect: Mapping[str, float] = field(default_factory=dict)  # both groups, in the soak
    baseline: bool = False  # also samples from before the update, without any effect
    heartbeats: bool = True
    models: Sequence[MetricModel] = FLEET
    strata: Sequence[str] = (DEFAULT_STRATUM,)  # nodes are dealt round-robin into these


def generate(scenario: Scenario, rng: np.random.Generator) -> SampleTable:
    """The samples of one scenario, deterministic for a seeded ``rng``."""
    sc = scenario
    n_nodes = sc.canary + sc.control
    nodes = [f"canary-{i:05d}" for i in range(sc.canary)] + [
        f"control-{i:05d}" for i in range(sc.control)
    ]
    canary = np.arange(n_nodes) < sc.canary
    strata = [sc.strata[i % len(sc.strata)] for i in range(n_nodes)]
    phases = [True, False] if sc.baseline else [False]
    per = sc.samples_per_node
    metric_names = [m.name for m in sc.models] + ([HEARTBEAT] if sc.heartbeats else [])
    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("node", "metric", "value", "time", "base")}
    node_of_sample = np.repeat(np.arange(n_nodes), per)
    slot = np.tile(np.arange(per), n_nodes)
    for code, model in enumerate(sc.models):
        level = np.full(n_nodes, model.center)
        if model.kind is Kind.NORMAL:
            level = level * (1 + model.node_sd * rng.standard_normal(n_nodes))
        for before in phases:
            factor = np.ones(n_nodes)
            if not before:
                factor *= sc.fleet_effect.get(model.name, 1.0)
                factor[canary] *= sc.canary_effect.get(model.name, 1.0)
            mean = (level * factor)[node_of_sample]
            if model.kind is Kind.NORMAL:
                values = mean * (1 + model.sample_sd * rng.standard_normal(len(mean)))
            elif model.kind is Kind.POISSON:
                values = rng.poisson(mean).astype(np.float64)
            else:
                values = (rng.random(len(mean)) < mean).astype(np.float64)
            _append(cols, node_of_sample, code, values, slot, before, per)
    if sc.heartbeats:
        for before in phases:
            counter = (slot + (0 if before else per)).astype(np.float64)
            _append(cols, node_of_sample, len(sc.models), counter, slot, before, per)
    return SampleTable.from_columns(
        nodes=nodes,
        canary=canary,
        node_strata=strata,
        metrics=metric_names,
        node=np.concatenate(cols["node"]),
        metric=np.concatenate(cols["metric"]),
        value=np.concatenate(cols["value"]),
        time=np.concatenate(cols["time"]),
        baseline=np.concatenate(cols["base"]),
    )


def _append(
    cols: dict[str, list[np.ndarray]],
    node: np.ndarray,
    code: int,
    values: np.ndarray,
    slot: np.ndarray,
    before: bool,
    per: int,
) -> None:
    cols["node"].append(node)
    cols["metric"].append(np.full(len(node), code, dtype=np.int64))
    cols["value"].append(values)
    cols["time"].append(START + (slot - (per if before else 0)) * INTERVAL)
    cols["base"].append(np.full(len(node), before))


def end_of_soak(scenario: Scenario) -> float:
    """The time of the last soak sample: evaluate the gate as of then."""
    return START + (scenario.samples_per_node - 1) * INTERVAL
