"""Shared value types: the words of ``design.md``'s vocabulary as constrained types."""

from __future__ import annotations

import enum
import re
from typing import Annotated

from pydantic import Field

# NATS subject tokens may not contain '.', '*', '>' or white space (ADR-6, nats-server subject
# rules); every id that becomes a subject token is constrained so here, once.
TOKEN_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"  # noqa: S105 - a regex, not a secret

NodeId = Annotated[str, Field(pattern=TOKEN_PATTERN, description="Node id (a subject token).")]
SiteId = Annotated[str, Field(pattern=TOKEN_PATTERN, description="Site id (a subject token).")]
RolloutId = Annotated[
    str, Field(pattern=TOKEN_PATTERN, description="Rollout id (a subject token).")
]
StackHash = Annotated[
    str,
    Field(
        pattern=r"^[0-9a-f]{64}$",
        description="Canonical SHA-256 of a golden stack, lower-case hex.",
    ),
]
# A version is free-form (Redfish SoftwareInventory.Version), but never a control character
# (C0, DEL, C1): a NUL ends the string for C readers of a log, a database column or a BMC's
# parser, and a newline forges log lines, so "1.2\x00" would be one version here and another
# to them.
VERSION_MAX = 128
VERSION_PATTERN = r"^[^\x00-\x1f\x7f-\x9f]+$"
Version = Annotated[
    str,
    Field(
        min_length=1,
        max_length=VERSION_MAX,
        pattern=VERSION_PATTERN,
        description="A version string (no control characters).",
    ),
]
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def as_version(raw: str) -> str:
    """What a ``Version`` can hold of a version a device reported: each control character
    replaced by U+FFFD and the whole cut to 128 characters. A BMC's ``Version`` is free text;
    refusing it would make one odd device fail every event and query that names it."""
    return _CONTROL.sub("\ufffd", raw)[:VERSION_MAX] or "\ufffd"


TEXT_MAX = 4096  # characters in one free-text field of an event (reasons, details, errors)
Text = Annotated[str, Field(max_length=TEXT_MAX)]


def clip_text(value: str) -> str:
    """``value`` cut to what a ``Text`` field holds: evidence cut short is still worth sending,
    where evidence too long would make the whole event invalid."""
    return value[:TEXT_MAX]


class Component(enum.StrEnum):
    """One versioned thing on a node (design.md vocabulary)."""

    BMC = "bmc"
    BIOS = "bios"
    GPU_VBIOS = "gpu_vbios"
    GPU_GSP = "gpu_gsp"
    NVSWITCH = "nvswitch"
    NIC = "nic"
    OPTICS = "optics"
    PSU = "psu"
    BBU = "bbu"
    CPLD = "cpld"
    EROT = "erot"
    DRIVER = "driver"
    CUDA = "cuda"
    NCCL = "nccl"
    CUDNN = "cudnn"
    CONTAINER_TOOLKIT = "container_toolkit"
    FABRIC_MANAGER = "fabric_manager"
    KERNEL = "kernel"


class ChangeClass(enum.StrEnum):
    """Decides approvals, canary width and soak time of a rollout."""

    EMERGENCY = "emergency"
    ROUTINE = "routine"
    STANDARD = "standard"
    POWER_FABRIC = "power_fabric"


class DriftKind(enum.StrEnum):
    """Why a node's actual tuple differs from its pin (issue 4 names the kinds)."""

    PENDING = "pending"
    UNEXPECTED = "unexpected"
    INCOMPATIBLE = "incompatible"
    MISSING = "missing"
    UNKNOWN = "unknown"
    GSP_MISMATCH = "gsp_mismatch"


class Severity(enum.StrEnum):
    """How urgently a human should look."""

    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"


class CheckResult(enum.StrEnum):
    """Outcome of one attestation check."""

    PASS = "pass"  # noqa: S105 - a verdict, not a password
    FAIL = "fail"


class GateVerdict(enum.StrEnum):
    """Three-valued health-gate verdict: missing data is never a pass."""

    PASSED = "passed"
    TRIPPED = "tripped"
    INCONCLUSIVE = "inconclusive"


class DeviceOutcome(enum.StrEnum):
    """Per-device step outcomes the updater reports."""

    STAGED = "staged"
    ACTIVATED = "activated"
    VERIFIED = "verified"
    FAILED = "failed"
    ROLLED_BACK = "rolled_back"


class RollbackMechanism(enum.StrEnum):
    """How a device was put back on its previous version (``device.rolled_back``)."""

    INACTIVE_IMAGE = "inactive_image"
    """The BMC keeps the previous image as an inactive SoftwareInventory entry (Supermicro
    ``Backup_BMC``) and runs it again: the device's ``Links.ActiveSoftwareImage`` set to that
    entry (DMTF Manager v1_6_0, Bios v1_1_0), then the BMC profile's activation reset."""
    REFLASH = "reflash"
    """One-way: the previous attested image written again by the BMC profile's push, the
    downgrade forced (``ForceUpdate``), then run by the profile's activation (no second bank to
    run)."""
    IN_BAND_FALLBACK = "in_band_fallback"
    """The node agent installed the previous known-good software branch (seed 004)."""


class ObservationSource(enum.StrEnum):
    """Where a version tuple was read."""

    REDFISH = "redfish"
    AGENT = "agent"
