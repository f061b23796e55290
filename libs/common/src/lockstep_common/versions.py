"""The one ordering of firmware and software version strings, or saying that they cannot be
ordered (pure). Every call site orders versions through it: the Redfish preflight and read-back
(``LowestSupportedVersion``, a downgrade), the compatibility rules (a driver below a floor),
attest's anti-rollback check and the updater's in-band fallback branch; a test holds them to
the same answer on every version string in the reference captures.

SoftwareInventory ``Version`` is free-form (standards.md 1.3: the GB200 mockup alone shows
``97.00.6C.00.03``, ``0x00 0x0b 0x03 0x04``, ``01.03.0262.0000_n04``, ``GB200Nvl-24.12-8``),
and ``VersionScheme`` (SoftwareInventory v1_9_0) says how to read it when the BMC gives it:

- ``DotIntegerNotation``: ``^\\d+(\\.\\d+)*$``, leading zeros ignored, compared as integers;
- ``SemVer``: precedence as in Semantic Versioning 2.0.0 section 11;
- ``OEM`` or absent: the heuristic below.

The heuristic splits on ``.``, ``-``, ``_``, ``+`` and spaces and compares field by field up to
the first difference, which must be between two fields of the same kind: decimal numbers
(as integers), or hexadecimal fields of equal width, with an optional ``0x`` (as hexadecimal:
NVIDIA writes ``6C`` after ``52``), or letters followed by a number, with the same letters
(``n04`` < ``n05``). Anything else is ``None``: the caller must not guess (a refusal, for
``LowestSupportedVersion``): ordering ``GB200Nvl`` against ``GB300Nvl`` would be inventing facts.
Fields equal as numbers (``01`` and ``1``) are equal: the comparison goes on to the next field.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

DOT_INTEGER = "DotIntegerNotation"  # SoftwareInventory.VersionScheme, as NVIDIA drivers are written

_SEPARATORS = re.compile(r"[.\-_+ ]+")
_DOT_INTEGER = re.compile(r"\d+(\.\d+)*")
_SEMVER = re.compile(r"v?(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?")
_HEX = re.compile(r"(?:0x)?([0-9a-f]+)")
_COUNTER = re.compile(r"([a-z]+)(\d+)")  # letters then a number: n04, rc1


def _sign(a: Any, b: Any) -> int:
    return int(a > b) - int(a < b)


def _dot_integer(a: str, b: str) -> int:
    left = [int(p) for p in a.split(".")]
    right = [int(p) for p in b.split(".")]
    width = max(len(left), len(right))  # 1.2 == 1.2.0
    return _sign(left + [0] * (width - len(left)), right + [0] * (width - len(right)))


def _prerelease_key(part: str) -> tuple[int, int, str]:
    # SemVer 11.4: numeric identifiers sort below alphanumeric ones, numerically.
    return (0, int(part), "") if part.isdigit() else (1, 0, part)


def _semver(a: re.Match[str], b: re.Match[str]) -> int:
    core = _sign(tuple(int(a[i]) for i in (1, 2, 3)), tuple(int(b[i]) for i in (1, 2, 3)))
    if core or a[4] == b[4]:
        return core
    if a[4] is None or b[4] is None:  # a release sorts above its pre-releases (11.3)
        return 1 if a[4] is None else -1
    return _sign(
        [_prerelease_key(p) for p in a[4].split(".")],
        [_prerelease_key(p) for p in b[4].split(".")],
    )


def _field(a: str, b: str) -> int | None:
    """Order two differing fields (already lower-cased), or None."""
    if a.isdigit() and b.isdigit():
        return _sign(int(a), int(b))
    hex_a, hex_b = _HEX.fullmatch(a), _HEX.fullmatch(b)
    if hex_a and hex_b and len(hex_a[1]) == len(hex_b[1]):
        return _sign(int(hex_a[1], 16), int(hex_b[1], 16))
    counter_a, counter_b = _COUNTER.fullmatch(a), _COUNTER.fullmatch(b)
    if counter_a and counter_b and counter_a[1] == counter_b[1]:
        return _sign(int(counter_a[2]), int(counter_b[2]))
    return None  # e.g. GB200Nvl vs GB300Nvl: a name with a number in it, not a counter


def _heuristic(a: str, b: str) -> int | None:
    left, right = _SEPARATORS.split(a.lower()), _SEPARATORS.split(b.lower())
    if len(left) != len(right):
        return None
    for x, y in zip(left, right, strict=True):
        if x != y:
            order = _field(x, y)
            if order != 0:
                return order  # -1, 1, or None: these two fields cannot be ordered
    return 0


def compare_versions(a: str, b: str, scheme: str | None = None) -> int | None:
    """-1, 0 or 1 as ``a`` is below, equal to or above ``b``; None when they cannot be
    ordered. ``scheme`` is the member's ``VersionScheme``; versions that do not fit it fall
    back to the heuristic."""
    if a == b:
        return 0
    if scheme == DOT_INTEGER and _DOT_INTEGER.fullmatch(a) and _DOT_INTEGER.fullmatch(b):
        return _dot_integer(a, b)
    if scheme == "SemVer":
        sem_a, sem_b = _SEMVER.fullmatch(a), _SEMVER.fullmatch(b)
        if sem_a and sem_b:
            return _semver(sem_a, sem_b)
    return _heuristic(a, b)


def is_dot_integer(version: str) -> bool:
    """Whether ``version`` is written in ``DotIntegerNotation`` (``570.172.08``)."""
    return _DOT_INTEGER.fullmatch(version) is not None


def older(a: str, b: str, scheme: str | None = None) -> bool | None:
    """Whether ``a`` is strictly below ``b``; None when they cannot be ordered."""
    order = compare_versions(a, b, scheme)
    return None if order is None else order < 0


def newest(versions: Iterable[str], scheme: str | None = None) -> str | None:
    """The version above every other one; None when there is none, or when one of them cannot
    be ordered against it (the caller must not guess which is newer)."""
    candidates = list(dict.fromkeys(versions))
    if not candidates:
        return None
    best = candidates[0]
    for v in candidates[1:]:
        order = compare_versions(v, best, scheme)
        if order is None:
            return None
        if order > 0:
            best = v
    if any(compare_versions(best, v, scheme) is None for v in candidates):
        return None
    return best
