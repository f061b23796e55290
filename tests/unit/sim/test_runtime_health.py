"""``FleetRuntime`` gives each node agent its profile's health baseline, the simulator's clock,
and the health scenarios of the simulator's live fault plan."""

from __future__ import annotations

import pytest

from lockstep_sim.faults import Fault, FaultPlan
from lockstep_sim.options import SimOptions
from lockstep_sim.runtime import FleetRuntime

pytestmark = pytest.mark.unit


def runtime() -> FleetRuntime:
    options = SimOptions(40, "mixed", seed=3, time_scale=0.5, port=0)
    return FleetRuntime(options, scheduler_port=0, cadence_s=2.0)


def test_every_agent_reports_its_own_profiles_expected_busbw() -> None:
    rt = runtime()
    expected = {"gb200": 450.0, "hgx-h100": 370.0}
    assert {n.profile for n in rt.fleet} == set(expected)
    for node in rt.fleet:
        software = rt.software[node.id]
        assert software.sample_health().nccl_expected_gbps == expected[node.profile]
        # 2 real seconds between reports at 0.5 real seconds per simulated minute.
        assert software.cadence_s == 240.0


def test_the_live_fault_plan_starts_and_ends_a_thermal_event_on_one_rack() -> None:
    rt = runtime()
    racks = {n.rack for n in rt.fleet}
    assert len(racks) > 1
    rack = rt.fleet[0].rack
    rt.simulator.set_faults(FaultPlan((Fault("thermal_event", racks=(rack,)),)))
    for node in rt.fleet:
        reasons = rt.software[node.id].sample_health().throttle_reasons
        assert ("hw_thermal_slowdown" in reasons) is (node.rack == rack), node.id
    rt.simulator.set_faults(None)
    assert all(
        "hw_thermal_slowdown" not in rt.software[n.id].sample_health().throttle_reasons
        for n in rt.fleet
    )
