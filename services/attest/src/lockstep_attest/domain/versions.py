"""Ordering of vendor version strings ("97.00.9A.00.01", "580.95.05", "25.06-2_NV_WW_01").

Versions are split into runs of digits and runs of other characters; digit runs compare as
numbers, other runs as case-insensitive text, and a version that is a prefix of another is the
older one. This is the ordering Redfish ``VersionScheme`` "DotIntegerNotation" implies, extended
to the mixed forms real firmware uses.

NVIDIA VBIOS versions are the exception: five dot-separated bytes in hex ("97.00.9A.00.01"), so
each field compares as a hex number (9A after 90), not as "9" then "A" (which would sort it
before 90). Two-digit decimal fields read as hex keep their order, so a VBIOS version written
without letters compares the same either way.
"""

from __future__ import annotations

import re

_TOKENS = re.compile(r"\d+|[A-Za-z]+")
_VBIOS = re.compile(r"[0-9A-Fa-f]{2}(?:\.[0-9A-Fa-f]{2}){4}")


def version_key(version: str) -> tuple[tuple[int, int | str], ...]:
    """A sort key for ``version`` (separators are ignored)."""
    if _VBIOS.fullmatch(version):
        return tuple((0, int(field, 16)) for field in version.split("."))
    return tuple((0, int(t)) if t.isdigit() else (1, t.lower()) for t in _TOKENS.findall(version))


def older(a: str, b: str) -> bool:
    """Whether ``a`` is strictly older than ``b``."""
    return version_key(a) < version_key(b)
