"""What the planner knows about the fleet and the bundle it moves the fleet to.

Plain frozen dataclasses rather than pydantic models: they are built from already-validated
events or the planner's own projection (issue 10, deliverable 1), and a 12,500-node fleet is
planned in well under the two-second budget only if building them costs next to nothing.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import NamedTuple


class ComponentKind(enum.StrEnum):
    """How a bundle component is applied and how far it can be reverted (seed 000, the
    update-class table: the risk gradient from software down to power firmware)."""

    SOFTWARE = "software"
    """In-band, re-pinnable: driver, CUDA, NCCL, ..."""
    AB_FIRMWARE = "ab_firmware"
    """Dual-bank device: activation and rollback are a pointer flip."""
    FABRIC_SWITCH = "fabric_switch"
    """NVSwitch tray firmware: degrades the whole NVLink domain, so the domain moves as one."""
    ONE_WAY_FIRMWARE = "one_way_firmware"
    """Single-bank device: the revert plan is a re-flash or a hardware swap."""
    PSU_BBU = "psu_bbu"
    """Power-path firmware: one redundant side at a time, assumed to have no clean revert."""


LAYER_ORDER: tuple[ComponentKind, ...] = tuple(ComponentKind)
"""Reversible to one-way (seed 000: "sequence updates from the reversible top of the stack toward
the irreversible bottom, gating each layer on a health check before touching the next"). Switch
firmware comes before one-way device firmware because seed 000 lists it with A/B-if-present."""

ONE_WAY_KINDS = frozenset({ComponentKind.ONE_WAY_FIRMWARE, ComponentKind.PSU_BBU})
"""Kinds whose change class must allow one-way work (seed 000: power/fabric firmware, "plan
assumes no clean revert")."""


class PowerSide(enum.StrEnum):
    """The redundant power feed a node's PSU/BBU firmware belongs to."""

    A = "A"
    B = "B"


class Stratum(NamedTuple):
    """A group the canary must represent (design.md vocabulary): firmware bugs are often SKU-,
    supplier- or starting-version-specific (seed 000)."""

    profile: str
    supplier: str
    stack: str


@dataclass(frozen=True, slots=True)
class Node:
    """One server as the planner sees it."""

    id: str
    profile: str
    supplier: str
    site: str
    rack: str
    pool: str
    fabric_domain: str | None
    power_side: PowerSide
    stack: str
    """Hash of the stack the node currently runs (its observed tuple, hashed)."""
    drifted: bool = False
    """Unexplained drift (inventory's ``unexpected``/``incompatible``), not a pending rollout."""
    readable: bool = True
    """False when the BMC could not be read on the last sweep."""
    idle: bool = False
    """No job on it now: cheapest to drain, so the canary prefers it."""
    healthy: bool = True

    @property
    def stratum(self) -> Stratum:
        return Stratum(self.profile, self.supplier, self.stack)


@dataclass(frozen=True, slots=True)
class Window:
    """A maintenance window ``[start, end)``."""

    start: datetime
    end: datetime

    def __post_init__(self) -> None:
        if self.end <= self.start:
            raise ValueError(f"maintenance window ends ({self.end}) before it starts")


@dataclass(frozen=True, slots=True)
class Pool:
    """A scheduler pool: its out-of-service budget and when work may take nodes out."""

    name: str
    max_unavailable: int
    windows: tuple[Window, ...] | None = None
    """None: no restriction. Empty: nothing may ever be taken out of service."""
    set_by: str = ""
    """Where the operator sets ``max_unavailable`` (a setting's name): a refusal over the budget
    names it, so the operator knows what to change."""

    def __post_init__(self) -> None:
        if self.max_unavailable < 1:
            raise ValueError(f"pool {self.name}: max_unavailable must be at least 1")


@dataclass(frozen=True, slots=True)
class BundleComponent:
    """One component of the target bundle and what applying it costs."""

    name: str
    version: str
    kind: ComponentKind
    stage_s: int
    """Copying the image to the device."""
    activate_s: int
    """Switching to it across a reset."""
    impactless_staging: bool = False
    """Staging runs while the node works; only activation takes it out of service (seed 000,
    "impactless / staged activation")."""
    profiles: frozenset[str] | None = None
    """Hardware profiles it applies to; None: all."""
    reflash: bool = False
    """A/B firmware whose BMC keeps no previous image to run again (the BMC profile's answer):
    a flip-back after a tripped gate re-flashes the previous attested image, a forced
    downgrade, which the plan says before approval (``Plan.reflash``)."""

    def __post_init__(self) -> None:
        if self.stage_s < 0 or self.activate_s < 0:
            raise ValueError(f"component {self.name}: durations must not be negative")

    def applies_to(self, profile: str) -> bool:
        return self.profiles is None or profile in self.profiles

    @property
    def outage_s(self) -> int:
        """Seconds the node is out of service for this component."""
        return self.activate_s + (0 if self.impactless_staging else self.stage_s)

    @property
    def prestage_s(self) -> int:
        """Seconds of staging done while the node is still in service."""
        return self.stage_s if self.impactless_staging else 0


@dataclass(frozen=True, slots=True)
class Bundle:
    """The target: an attested bundle's stack hash and its components in manifest order."""

    stack: str
    components: tuple[BundleComponent, ...] = field(default=())

    @property
    def moves_fabric(self) -> bool:
        return any(c.kind is ComponentKind.FABRIC_SWITCH for c in self.components)
