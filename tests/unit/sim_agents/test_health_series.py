"""The node agents' health series: per-profile baselines, per-node offsets, noise that never
breaks the 92% busbw rule, diurnal drift, benign XIDs outside the healthgate's fatal set, and
the health scenarios of the fault plan (thermal event, network problem)."""

from __future__ import annotations

import functools
import statistics
import tomllib
from importlib import resources

import pytest

from lockstep_sim.agents.health_model import (
    BASELINES,
    BENIGN_XIDS,
    BUSBW_GATE_RATIO,
    NORMAL,
    Conditions,
)
from lockstep_sim.agents.software import HealthSample, NodeSoftware
from lockstep_sim.faults import Fault, FaultPlan, FaultPlanError, parse_plan
from lockstep_sim.health_scenarios import conditions_for

pytestmark = pytest.mark.unit


def series(node: NodeSoftware, reports: int) -> list[HealthSample]:
    return [node.sample_health() for _ in range(reports)]


def median(samples: list[HealthSample], field: str) -> float:
    return statistics.median(float(getattr(s, field)) for s in samples)


def test_each_profile_reports_its_own_expected_busbw_and_clocks() -> None:
    gb200 = series(NodeSoftware("n1", profile="gb200"), 200)
    h100 = series(NodeSoftware("n1", profile="hgx-h100"), 200)
    assert {s.nccl_expected_gbps for s in gb200} == {450.0}
    assert {s.nccl_expected_gbps for s in h100} == {370.0}  # seed 001: ~370 GB/s on NDR
    for samples, profile in ((gb200, "gb200"), (h100, "hgx-h100")):
        clock = median(samples, "sm_clock_mhz")
        assert abs(clock / BASELINES[profile].sm_clock_mhz - 1) < 0.03, profile
    assert median(gb200, "gpu_power_w") > median(h100, "gpu_power_w")


def test_healthy_nodes_differ_persistently_but_never_break_the_busbw_rule() -> None:
    nodes = [NodeSoftware(f"node-{i:05d}", seed=11, diurnal_period_s=3_600.0) for i in range(20)]
    runs = {n.node_id: series(n, 500) for n in nodes}
    for samples in runs.values():
        for s in samples:
            assert s.nccl_busbw_gbps is not None
            assert s.nccl_busbw_gbps >= BUSBW_GATE_RATIO * s.nccl_expected_gbps
            assert s.dcgm_passed and not s.gsp_init_failed
    medians = sorted(median(s, "nccl_busbw_gbps") for s in runs.values())
    # Per-node offsets: the medians spread by more than noise over 500 reports would give ...
    assert medians[-1] - medians[0] > 0.005 * 450
    # ... but stay within a few percent: no healthy node looks like a straggler (5% drop).
    assert medians[-1] / medians[0] < 1.04
    # The same node keeps its offset: its second run's median is close to its first.
    again = NodeSoftware("node-00000", seed=11, diurnal_period_s=3_600.0)
    first = median(runs["node-00000"], "nccl_busbw_gbps")
    assert abs(median(series(again, 500)[250:], "nccl_busbw_gbps") - first) < 0.003 * 450


def test_temperatures_drift_with_the_simulated_day_for_every_node_alike() -> None:
    # A report every 10 simulated seconds and a 2,400 s "day": 240 reports per period; the
    # peak is a quarter period in (report 60) and the trough three quarters in (report 180).
    nodes = [NodeSoftware(f"n{i}", diurnal_period_s=2_400.0) for i in range(10)]
    runs = [series(n, 240) for n in nodes]
    warm = statistics.mean(s.max_temperature_c or 0 for run in runs for s in run[50:70])
    cool = statistics.mean(s.max_temperature_c or 0 for run in runs for s in run[170:190])
    assert warm - cool > 3.0


def test_benign_xids_are_rare_application_level_codes_outside_the_fatal_set() -> None:
    policy = tomllib.loads(
        resources.files("lockstep_gate").joinpath("data/default_policy.toml").read_text()
    )
    fatal = {str(code) for code in policy["hard_rules"]["fatal_xids"]}
    assert not fatal & set(BENIGN_XIDS)
    node = NodeSoftware("n1", seed=2)
    rare = [s.xid_counts for s in series(node, 20_000) if s.xid_counts]
    assert 0 < len(rare) < 40  # ~0.05% of reports: a handful a day per node at 10 s
    often = NodeSoftware("n1", seed=2, benign_xid_rate=0.2)
    seen = [s.xid_counts for s in series(often, 500) if s.xid_counts]
    assert 50 < len(seen) < 150
    assert {code for xids in seen for code in xids} == set(BENIGN_XIDS)
    assert all(set(xids.values()) == {1} for xids in seen)


def test_a_thermal_event_throttles_heats_and_slows_collectives() -> None:
    plan = FaultPlan((Fault("thermal_event", racks=("rack-0001",)),))
    hot, calm = NodeSoftware("n1"), NodeSoftware("n1")
    hot.conditions = lambda: conditions_for(plan, "n1", "rack-0001")
    calm.conditions = lambda: conditions_for(plan, "n1", "rack-0000")
    for h, c in zip(series(hot, 50), series(calm, 50), strict=True):
        assert "hw_thermal_slowdown" in h.throttle_reasons
        assert "hw_thermal_slowdown" not in c.throttle_reasons
        assert h.sm_clock_mhz == pytest.approx(0.8 * (c.sm_clock_mhz or 0), abs=0.2)
        assert (h.max_temperature_c or 0) == pytest.approx((c.max_temperature_c or 0) + 18, 0.01)
        assert (h.nccl_busbw_gbps or 0) == pytest.approx(0.9 * (c.nccl_busbw_gbps or 0), abs=0.02)
        # The scenario bends the gauges and nothing else: the same draws, the same XIDs.
        assert h.xid_counts == c.xid_counts and h.heartbeat == c.heartbeat


def test_a_fleet_wide_network_problem_cuts_busbw_on_every_node() -> None:
    plan = FaultPlan((Fault("network_degraded", busbw_factor=0.6),))
    for node_id in ("a", "b", "c"):
        assert conditions_for(plan, node_id, "rack-0000") == Conditions(busbw_factor=0.6)
        node = NodeSoftware(node_id)
        node.conditions = functools.partial(conditions_for, plan, node_id, "rack-0000")
        for s in series(node, 20):
            assert (s.nccl_busbw_gbps or 0) < 0.6 * s.nccl_expected_gbps
            assert s.throttle_reasons in {(), ("sw_power_cap",)}
    assert conditions_for(FaultPlan(), "a", "rack-0000") is NORMAL


def test_scenarios_combine_and_target_nodes_or_racks() -> None:
    plan = FaultPlan(
        (
            Fault("thermal_event", nodes=("n2",), clock_factor=0.5, temperature_rise_c=10),
            Fault("network_degraded", racks=("rack-0003",), busbw_factor=0.5),
            Fault("latency", latency_ms=5),  # not a health scenario: ignored here
        )
    )
    both = conditions_for(plan, "n2", "rack-0003")
    assert (both.clock_factor, both.busbw_factor, both.temperature_rise_c) == (0.5, 0.5, 10)
    assert conditions_for(plan, "n3", "rack-0004") is NORMAL


def test_health_scenarios_load_from_plan_json_and_bad_values_are_named() -> None:
    plan = parse_plan(
        {
            "faults": [
                {"kind": "thermal_event", "racks": ["rack-0002"], "clock_factor": 0.7},
                {"kind": "network_degraded", "busbw_factor": 0.5},
            ]
        }
    )
    assert plan.faults[0].racks == ("rack-0002",)
    assert plan.to_dict()["faults"] == [
        {
            "kind": "thermal_event",
            "racks": ["rack-0002"],
            "probability": 1.0,
            "clock_factor": 0.7,
            "temperature_rise_c": 18.0,
            **_common(),
        },
        {"kind": "network_degraded", "probability": 1.0, "busbw_factor": 0.5, **_common()},
    ]
    # Other kinds' JSON does not grow the scenario fields.
    assert "busbw_factor" not in Fault("latency").to_dict()
    with pytest.raises(FaultPlanError, match=r"faults\[0\]\.busbw_factor: must be between"):
        parse_plan([{"kind": "network_degraded", "busbw_factor": 1.5}])
    with pytest.raises(FaultPlanError, match=r"faults\[0\]\.temperature_rise_c"):
        parse_plan([{"kind": "thermal_event", "temperature_rise_c": -3}])
    with pytest.raises(FaultPlanError, match=r"faults\[0\]\.racks: must be a list"):
        parse_plan([{"kind": "thermal_event", "racks": "rack-1"}])


def _common() -> dict[str, object]:
    """The fields every fault's JSON carries, at their defaults."""
    return {
        key: value
        for key, value in Fault("latency").to_dict().items()
        if key not in {"kind", "probability"}
    }
