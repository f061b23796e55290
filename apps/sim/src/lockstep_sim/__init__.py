"""Lockstep fleet simulator: emulated Redfish BMCs (and, later, node agents and a scheduler)."""
