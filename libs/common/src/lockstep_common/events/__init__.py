"""Versioned event payloads. ``REGISTRY`` decodes any of them from the wire."""

from lockstep_common.envelope import EventRegistry
from lockstep_common.events.v1 import CATALOGUE

REGISTRY = EventRegistry(list(CATALOGUE))

__all__ = ["REGISTRY"]
