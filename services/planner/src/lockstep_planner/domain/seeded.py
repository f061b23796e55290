"""Reproducible tie-breaking: the same seed orders the same ids the same way in every process.

Python's ``hash()`` of a string is salted per process (PYTHONHASHSEED), and ``random`` drifts
with the order of calls; a keyed SHA-256 depends on the seed and the id alone, so a plan can be
recomputed, compared and approved (issue 10: "reproducible (seeded)").
"""

from __future__ import annotations

import hashlib


def rank(seed: str, key: str) -> int:
    """A 64-bit number fixed by ``seed`` and ``key``: sort by it to shuffle reproducibly."""
    digest = hashlib.sha256(f"{seed}\x00{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big")
