"""Lockstep planner service."""
