"""Lockstep inventory service."""
