"""Test and benchmark helpers of the healthgate service (synthetic fleets)."""
