"""What a work item's steps record for the next run of a step: typed, versioned, one model per
kind of work item (issue 28 item 2).

The store keeps the document as JSON (``node_work.progress``); the executor reads it with
:func:`load` at every claim and writes it back with :func:`document`. A rolling upgrade of the
updater resumes nodes mid-step, so :func:`load` reads every shape an earlier release stored
(``tests/data/updater/progress/`` holds them; the migration test reads each) and
:func:`document` writes a shape the previous release still reads: the same keys, with absent
values left out rather than written as ``null`` (it read them with ``dict.get``/``setdefault``)
and a ``schema_version`` it ignores.

Versions: 0, no ``schema_version`` key (the release before this model); 1, the same keys with
``schema_version: 1``. A document from a later version than this code knows is refused (an older
updater must not rewrite what it cannot read in full).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from lockstep_common.vocabulary import RollbackMechanism
from lockstep_updater.domain.steps import NodeStep

SCHEMA_VERSION = 1


class UnknownProgress(ValueError):
    """A progress document this release cannot read (a later schema, or a malformed one)."""


class _Model(BaseModel):
    # Mutable on purpose: a step records into it as it goes, then saves it. Unknown keys are
    # refused: every key any release wrote is declared here (the migration test holds that).
    model_config = ConfigDict(extra="forbid", validate_assignment=False)


class PushTask(_Model):
    """The BMC task a push was accepted as, and when (epoch seconds): followed, never resent."""

    monitor: str | None
    task: str | None = None
    since: float | None = None


class ComponentPlan(_Model):
    """One component's firmware write, planned in preflight (or the flip back's plan)."""

    version: str
    """The version the members are moved to."""
    banks: str
    """``ab``: staged to the inactive bank and activated later; otherwise written in place."""
    targets: list[str]
    """The FirmwareInventory members written."""
    before: dict[str, str | None]
    """Each member's version read before anything was written."""
    sent: bool = False
    """Recorded before the push is sent (never sent twice)."""
    task: PushTask | None = None
    done: bool = False
    """Verified at ``version`` (or found there already)."""
    staged: bool = False
    """The image waits in the inactive bank (or, in place, was written)."""


class InBandUnit(_Model):
    """The driver package unit through the node agent (``steps.in_band``)."""

    version: str
    fallback: str | None
    """The previous known-good branch, tried once when ``version`` does not come up clean."""
    attempt: Literal["target", "fallback"] = "target"
    sent: dict[str, bool] = Field(default_factory=dict)
    """The agent calls recorded as sent in this attempt (``domain.inband.Call`` values)."""
    components: dict[str, str]
    before: dict[str, str | None]
    started_at: float | None = None
    reboot_sent_at: float | None = None
    failures: list[str] = Field(default_factory=list)
    note: str | None = None
    package_sha256: str | None = None
    """SHA-256 of the attested package of ``version`` (the rollout's bundle, or for the
    runbook's pin the latest bundle attesting it); None: no bundle attests it, nothing sent."""
    fallback_sha256: str | None = None
    """SHA-256 of the attested package of ``fallback``; None: no bundle attests it, and the
    fallback is not tried (the agent installs only attested bytes)."""


class Progress(_Model):
    """What every kind of work item records."""

    schema_version: int = SCHEMA_VERSION
    pool: str | None = None
    ending: NodeStep | None = None
    """How the node ends once given back (``uncordoning`` reads it)."""
    ending_reason: str | None = None
    skipped: bool = False
    """Left untouched (a foreign drain, not drained in time): no ``device.failed``."""
    errors: dict[str, int] = Field(default_factory=dict)
    """Failed tries of a step in a row, by step."""
    dark_since: float | None = None
    """When a BMC that accepted something stopped answering (epoch seconds)."""
    inventory_waits: int = 0
    cordoned_at: float | None = None


class FirmwareProgress(Progress):
    """Work that writes firmware through the BMC: a rollout's update, or its flip back."""

    components: dict[str, ComponentPlan] = Field(default_factory=dict)
    activate_sent: bool = False
    activations: list[tuple[str | None, str | None]] = Field(default_factory=list)
    """The activation's tasks still to follow, (monitor, task) each."""
    activated_at: float | None = None
    bmc_profile: str | None = None
    """The BMC profile preflight chose for the node (``lockstep_redfish/profiles``), by id;
    None: an item begun before profiles were chosen, which keeps that release's behaviour."""
    unsure_since: float | None = None
    """When an activation recorded but not known to be sent was first found looking unsent
    (``steps.activation.resolve_uncertain``): it is concluded unsent only ``reachable_s``
    later, a reset still under way having had its time."""
    bmc_login: Literal["session", "basic"] | None = None
    """How preflight logged in to the BMC (a session, or HTTP Basic over verified TLS where the
    service root offers no SessionService); the later steps log in the same way."""
    bmc_expand: bool = False
    """Whether the BMC's service root advertises ``$expand`` (read by preflight,
    ``lockstep_redfish.expand``): the steps then read a component's members in one request.
    False (and in items begun before it was recorded): one GET per member."""


class UpdateProgress(FirmwareProgress):
    """A rollout's update of one node (kind ``update``)."""

    in_band: InBandUnit | None = None
    in_band_sent: bool = False


class RollbackProgress(FirmwareProgress):
    """The flip back to the previous bank after a tripped gate (kind ``rollback``)."""

    rollback: bool = False
    """Set by the flip back's preflight (the previous release read the flag)."""
    mechanism: RollbackMechanism | None = None
    """How the previous images are run again, chosen by the flip back's preflight from the
    BMC's profile (``lockstep_redfish.flip_back``); None: an item from before the choice."""

    @field_validator("mechanism", mode="before")
    @classmethod
    def _retired(cls, value: object) -> object:
        # The previous release could record the simulator's own OEM SwitchBank, since deleted
        # (no real BMC offered it, issue 29 item 2). Such an item reads as one from before the
        # choice: in preflight the mechanism is chosen again from the BMC's profile; past it,
        # the activation finds no mechanism to send and ends the item with that reason, and a
        # switch already sent is settled by the read-back. Refused, the document would leave
        # the node in its step (``Executor._unreadable``).
        return None if value == "simulator_switch_bank" else value


class RemedyProgress(Progress):
    """The GSP / driver runbook (kind ``remedy``, seed 004)."""

    pin: str | None = None
    """The branch the drift asked for; else the installed driver package."""
    in_band: InBandUnit | None = None
    in_band_sent: bool = False


class ReleaseProgress(Progress):
    """An operator's release of a quarantined node (kind ``release``): born ended."""


InBandProgress = UpdateProgress | RemedyProgress
BY_KIND: dict[str, type[Progress]] = {
    "update": UpdateProgress,
    "rollback": RollbackProgress,
    "remedy": RemedyProgress,
    "release": ReleaseProgress,
}
"""The model of each kind of work item (``store.UPDATE`` ... ``store.RELEASE``)."""


def load(kind: str, stored: dict[str, Any]) -> Progress:
    """The typed progress of a work item of ``kind`` from its stored document, of any schema
    version up to :data:`SCHEMA_VERSION`; :class:`UnknownProgress` otherwise."""
    model = BY_KIND.get(kind)
    if model is None:
        raise UnknownProgress(f"no progress model for work items of kind {kind!r}")
    version = stored.get("schema_version", 0)
    if not isinstance(version, int) or not 0 <= version <= SCHEMA_VERSION:
        raise UnknownProgress(
            f"progress schema_version {version!r} is not one this release reads "
            f"(0 to {SCHEMA_VERSION})"
        )
    # Version 0 differs only in lacking the key: its shapes are version 1's.
    try:
        return model.model_validate({**stored, "schema_version": SCHEMA_VERSION})
    except ValueError as exc:
        raise UnknownProgress(f"{kind} progress does not read: {exc}") from None


def document(progress: Progress) -> dict[str, Any]:
    """The JSON document stored for ``progress``: absent values are left out, not ``null``
    (the previous release read them with ``get``/``setdefault`` defaults)."""
    doc = progress.model_dump(mode="json")
    out = {k: v for k, v in doc.items() if v is not None}
    unit = out.get("in_band")
    if isinstance(unit, dict):
        for key in ("started_at", "reboot_sent_at", "note"):
            if unit.get(key) is None:
                unit.pop(key, None)
    return out


def firmware(progress: Progress) -> FirmwareProgress:
    """``progress`` as a firmware item's (update or flip back); a step for those kinds only."""
    if not isinstance(progress, FirmwareProgress):
        raise UnknownProgress(f"{type(progress).__name__} has no firmware plan")
    return progress


def in_band(progress: Progress) -> InBandProgress:
    """``progress`` as an item's with in-band work (update or remedy)."""
    if not isinstance(progress, UpdateProgress | RemedyProgress):
        raise UnknownProgress(f"{type(progress).__name__} has no in-band unit")
    return progress
