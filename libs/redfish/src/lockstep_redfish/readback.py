"""Judging the version read back after an update (pure).

Success is the version read back from SoftwareInventory, never the task state (design.md
non-negotiable 4; style.md 7.8, as Ironic and Cray FAS do: the version must equal the image's
exactly). A BMC may report ``Completed`` and still run the old image (a silent revert), an
older one (a silent downgrade), another one, or none (the device stopped answering).
"""

from __future__ import annotations

from enum import StrEnum

from lockstep_common.versions import compare_versions


class Readback(StrEnum):
    VERIFIED = "verified"  # exactly the version pushed
    UNCHANGED = "unchanged"  # still the version from before the update
    DOWNGRADED = "downgraded"  # below the version from before: a silent downgrade
    OTHER = "other"  # neither: another version than the one pushed
    MISSING = "missing"  # no Version at all


def judge(before: str | None, after: str | None, expected: str, scheme: str | None) -> Readback:
    """The verdict on one target: ``before`` and ``after`` the update, ``expected`` pushed,
    ``scheme`` its ``VersionScheme``."""
    if after == expected:
        return Readback.VERIFIED
    if after is None:
        return Readback.MISSING
    if after == before:
        return Readback.UNCHANGED
    if before is not None and compare_versions(after, before, scheme) == -1:
        return Readback.DOWNGRADED
    return Readback.OTHER


def describe(path: str, verdict: Readback, before: str | None, after: str | None) -> str:
    """One clause for an error message about ``path``."""
    text = {
        Readback.VERIFIED: "at the expected version",
        Readback.UNCHANGED: f"unchanged at {after!r}",
        Readback.DOWNGRADED: f"silently downgraded from {before!r} to {after!r}",
        Readback.OTHER: f"at {after!r}, not the version pushed",
        Readback.MISSING: "reports no Version",
    }[verdict]
    return f"{path} {text}"
