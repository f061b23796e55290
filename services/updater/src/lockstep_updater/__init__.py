"""Lockstep updater service."""
