"""Adapters of the inventory service to the outside world (Redfish BMCs)."""
