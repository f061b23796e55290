"""Ordering of vendor version strings ("97.00.9A.00.01", "580.95.05", "25.06-2_NV_WW_01").

Versions are split into runs of digits and runs of other characters; digit runs compare as
numbers, other runs as case-insensitive text, and a version that is a prefix of another is the
older one. This is the ordering Redfish ``VersionScheme`` "DotIntegerNotation" implies, extended
to the mixed forms real firmware uses.
"""

from __future__ import annotations

import re

_TOKENS = re.compile(r"\d+|[A-Za-z]+")


def version_key(version: str) -> tuple[tuple[int, int | str], ...]:
    """A sort key for ``version`` (separators are ignored)."""
    return tuple((0, int(t)) if t.isdigit() else (1, t.lower()) for t in _TOKENS.findall(version))


def older(a: str, b: str) -> bool:
    """Whether ``a`` is strictly older than ``b``."""
    return version_key(a) < version_key(b)
