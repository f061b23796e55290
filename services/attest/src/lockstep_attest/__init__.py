"""Lockstep attest service."""
