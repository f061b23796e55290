"""Lockstep healthgate service."""
