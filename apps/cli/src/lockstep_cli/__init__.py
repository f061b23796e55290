"""Lockstep."""
