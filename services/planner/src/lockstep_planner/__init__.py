"""Lockstep planner:

turns intents into canaried, gated rollouts."""
