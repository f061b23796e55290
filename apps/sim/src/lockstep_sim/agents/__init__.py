"""Simulated in-band node agents: software state, health, and the JetStream publisher."""
