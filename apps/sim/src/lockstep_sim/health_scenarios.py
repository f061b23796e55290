"""What the health scenarios of a fault plan do to one node's series (pure).

The simulator's fault plan (``faults``; ``PUT /faults``, ``lockstep sim --faults``) carries the
health scenarios next to the BMC faults; the node agents ask, at every report, what the plan
holds for them now (``FleetRuntime`` wires ``NodeSoftware.conditions`` to this), so a scenario
starts and ends with the plan and needs no restart.
"""

from __future__ import annotations

from lockstep_sim.agents.health_model import NORMAL, THERMAL_THROTTLE_REASONS, Conditions
from lockstep_sim.faults import HEALTH_KINDS, Fault, FaultPlan


def _conditions_of(fault: Fault) -> Conditions:
    if fault.kind == "thermal_event":
        return Conditions(
            clock_factor=fault.clock_factor,
            temperature_rise_c=fault.temperature_rise_c,
            throttle_reasons=THERMAL_THROTTLE_REASONS,
        )
    if fault.kind == "network_degraded":
        return Conditions(busbw_factor=fault.busbw_factor)
    return NORMAL


def conditions_for(plan: FaultPlan, node_id: str, rack: str) -> Conditions:
    """Every health scenario of ``plan`` that targets the node, combined."""
    out = NORMAL
    for index, fault in enumerate(plan.faults):
        if fault.kind in HEALTH_KINDS and plan.targets_node(index, node_id, rack):
            out = out.combine(_conditions_of(fault))
    return out
