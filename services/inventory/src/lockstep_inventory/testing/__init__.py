"""In-memory stand-ins for the inventory's storage, for unit tests of handler and ingest logic
without PostgreSQL (never imported at runtime)."""

from lockstep_inventory.testing.memory_store import MemoryInventoryStore

__all__ = ["MemoryInventoryStore"]
