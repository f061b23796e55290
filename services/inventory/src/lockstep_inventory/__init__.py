"""Lockstep inventory:

the fleet registry, Redfish sweeps, drift detection and admission checks (issue 4)."""
