"""Lockstep node agent."""
