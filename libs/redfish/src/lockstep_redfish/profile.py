"""BMC profiles: what one vendor's or platform's Redfish dialect does, as data.

A profile is a TOML file in ``lockstep_redfish/profiles/`` (packaged with the library),
validated by :class:`BmcProfile`; nothing vendor-specific is decided in code. It declares:

- ``match``: what the service root, ``UpdateService``, ``Manager`` and ``FirmwareInventory``
  say on a BMC of this kind (``selection.select_profile`` scores them);
- ``login``: ``session`` (DSP0266 §13.3) and/or ``basic`` (HTTP Basic, DSP0266 §13.2: only
  ever over verified TLS, ``session.BmcSession``);
- ``members``: FirmwareInventory member -> Lockstep component, first match wins: member id
  globs (``fnmatch``), ``SoftwareId`` values, ``RelatedItem`` path globs and ``Oem`` keys;
  a row without a component keeps the member raw (not a Lockstep component);
- ``push``: ``multipart`` (UpdateService v1_6_0 ``MultipartHttpPushUri`` with
  ``UpdateParameters``), ``http_push`` (``HttpPushUri``, the whole body is the image) or
  ``simple_update`` (the BMC pulls ``ImageURI`` from the updater's image server), the apply
  times the BMC takes, the ``UpdateParameters`` it needs, and the minimum gap between two
  pushes to one BMC (NVIDIA: pushes back to back exhaust a GB200 BMC's memory);
- ``activation``: ``OperationApplyTime`` and the reset that makes an image run
  (``ComputerSystem.Reset``, ``Manager.Reset``, ``Chassis.Reset`` power cycle of a tray), or
  ``Stage`` then ``Activate`` (UpdateService v1_16_0);
- ``taskless``: what a 2xx answer without a task monitor means, and how long to read the
  inventory back before calling it not written (one bound, used by ``tasks`` and ``update``);
- ``downgrade``: how an older image is taken (``mode``): ``forced`` by a parameter
  (``ForceUpdate``), ``as_update`` (the standard has no force flag: sent as any update, the
  read-back decides) or ``refused``; only ever under a signed rollback approval;
- ``bank``: whether the BMC keeps a second image and how it is used (NVIDIA ``CommitImage``
  and background copy, inactive ``SoftwareInventory`` members).
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from enum import StrEnum
from functools import cache
from importlib import resources
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from lockstep_common.vocabulary import Component

_STRICT = ConfigDict(extra="forbid", frozen=True)
PROFILES_PACKAGE = "lockstep_redfish.profiles"


class LoginMethod(StrEnum):
    SESSION = "session"  # POST SessionService/Sessions, X-Auth-Token (DSP0266 §13.3)
    BASIC = "basic"  # Authorization: Basic on every request (DSP0266 §13.2), verified TLS only


class PushMethod(StrEnum):
    MULTIPART = "multipart"  # MultipartHttpPushUri, UpdateParameters + UpdateFile
    HTTP_PUSH = "http_push"  # HttpPushUri, the body is the image (deprecated in v1_6_0)
    SIMPLE_UPDATE = "simple_update"  # UpdateService.SimpleUpdate, the BMC pulls ImageURI


class TargetsFrom(StrEnum):
    MEMBER = "member"  # Targets name FirmwareInventory members (DSP0268 UpdateService)
    RELATED = "related"  # Targets name each member's RelatedItem (the device, e.g. a Manager)


class ResetKind(StrEnum):
    NONE = "none"  # the image runs once written (Immediate, the BMC restarts itself)
    SYSTEM = "system"  # ComputerSystem.Reset
    MANAGER = "manager"  # Manager.Reset
    CHASSIS = "chassis"  # Chassis.Reset (a power cycle of the whole tray)


class TasklessMeaning(StrEnum):
    DONE = "done"  # the write finished before the answer: read back within the bound
    WRITING = "writing"  # the BMC writes after answering (it may reboot): read back until bound


class BankKind(StrEnum):
    NONE = "none"  # one image: a flip-back is a re-flash of the previous image (one-way)
    COMMIT_IMAGE = "commit_image"  # an OEM action copies the running image to the other bank
    BACKGROUND_COPY = "background_copy"  # the BMC copies the new image to the other bank itself
    INACTIVE_INVENTORY = "inactive_inventory"  # the other bank is a SoftwareInventory member


class Match(BaseModel):
    """What a BMC of this kind says; every clause given must hold (an empty one: anything)."""

    model_config = _STRICT

    vendor: list[str] = []  # ServiceRoot.Vendor, exactly
    product: list[str] = []  # ServiceRoot.Product, globs
    root_oem: list[str] = []  # keys of ServiceRoot.Oem
    update_actions: list[str] = []  # any of these UpdateService actions (OEM ones included)
    managers: list[str] = []  # Manager member id globs, any
    members: list[str] = []  # FirmwareInventory member id globs, any
    priority: int = 0  # ties: the more specific profile says a higher number


class MemberRule(BaseModel):
    """One row of the member map; a member matches when any of the given hints does."""

    model_config = _STRICT

    component: Component | None = None  # None: kept raw, ``label`` says what it is
    label: str
    ids: list[str] = []  # member Id globs (fnmatch, case-sensitive)
    software_ids: list[str] = []  # SoftwareInventory.SoftwareId, exactly
    related: list[str] = []  # RelatedItem @odata.id globs
    oem: list[str] = []  # "Vendor.Property=value" in the member's Oem object

    @model_validator(mode="after")
    def _has_a_hint(self) -> MemberRule:
        if not (self.ids or self.software_ids or self.related or self.oem):
            raise ValueError(f"member rule {self.label!r} has no ids, software_ids, related or oem")
        return self


class Push(BaseModel):
    model_config = _STRICT

    methods: list[PushMethod] = Field(min_length=1)  # in order of preference
    apply_times: list[str] = ["Immediate"]  # @Redfish.OperationApplyTime values it takes
    targets: TargetsFrom = TargetsFrom.MEMBER
    # With ``targets = "related"``: the RelatedItem globs the BMC takes as a Target; a member
    # whose RelatedItem is none of them is named itself.
    related: list[str] = []
    parameters: dict[str, Any] = {}  # fixed UpdateParameters beyond Targets
    empty_targets_mean: str = "every applicable device"  # never sent empty (UpdateRequest)
    min_gap_s: float = Field(default=0.0, ge=0)  # between two pushes to one BMC


class Activation(BaseModel):
    model_config = _STRICT

    apply_time: str = "Immediate"
    reset: ResetKind = ResetKind.NONE
    reset_type: str | None = None  # ResetType of the reset action
    resource: str | None = None  # glob of the system/manager/chassis to reset
    # Push with ``Stage`` (UpdateService v1_16_0: the image waits in the inactive bank) and
    # run it with ``UpdateService.Activate`` (or ``SoftwareInventory.Activate``), DSP0268.
    stage_and_activate: bool = False

    @model_validator(mode="after")
    def _reset_named(self) -> Activation:
        if self.reset is not ResetKind.NONE and not (self.reset_type and self.resource):
            raise ValueError(f"a {self.reset} reset needs reset_type and resource")
        if self.stage_and_activate and self.reset is not ResetKind.NONE:
            raise ValueError("stage_and_activate activates by Activate, not by a reset")
        return self


class Taskless(BaseModel):
    model_config = _STRICT

    meaning: TasklessMeaning
    wait_s: float = Field(gt=0)  # read the inventory back for at most this long


class DowngradeMode(StrEnum):
    """How a BMC of the profile takes an older image (only ever under a signed rollback
    approval: a flip-back's re-flash, a forward downgrade)."""

    REFUSED = "refused"  # no known way: a downgrade is refused before anything is written
    FORCED = "forced"  # sent with ``force_parameter`` (NVIDIA ``ForceUpdate``)
    # DSP0268 defines no force flag: an older image is sent as any update is, and the read-back
    # decides (a BMC that refuses it, or whose version does not move, ends quarantined).
    AS_UPDATE = "as_update"


class Downgrade(BaseModel):
    model_config = _STRICT

    # Unset: ``forced`` where a force_parameter is named, else ``refused``.
    mode: DowngradeMode = DowngradeMode.REFUSED
    force_parameter: str | None = None  # e.g. ForceUpdate; only with mode forced
    # A flip-back's re-flash (a forced downgrade) only where the rollout's signed plan says so
    # (docs/updater.md "Flip-back"); false only for the simulator's own profile. A forward
    # downgrade always needs a signed rollback approval (``preflight.profile_refusals``).
    needs_signed_approval: bool = True

    @model_validator(mode="before")
    @classmethod
    def _mode_from_force(cls, data: Any) -> Any:
        if isinstance(data, dict) and "mode" not in data and data.get("force_parameter"):
            return {**data, "mode": DowngradeMode.FORCED}
        return data

    @model_validator(mode="after")
    def _force_named(self) -> Downgrade:
        if (self.mode is DowngradeMode.FORCED) != bool(self.force_parameter):
            raise ValueError("force_parameter goes with mode forced, and only with it")
        return self


class Bank(BaseModel):
    model_config = _STRICT

    kind: BankKind = BankKind.NONE
    action: str | None = None  # the UpdateService action (COMMIT_IMAGE)
    inactive_members: list[str] = []  # member id globs of the inactive image
    # The components whose previous image the second bank keeps (Supermicro: BMC and BIOS have
    # Backup_* entries, the HMC's GPUs none); empty: every component the profile maps.
    components: list[Component] = []

    @model_validator(mode="after")
    def _action_named(self) -> Bank:
        if self.kind is BankKind.COMMIT_IMAGE and not self.action:
            raise ValueError("a commit_image bank needs its action")
        if self.kind is BankKind.INACTIVE_INVENTORY and not self.inactive_members:
            raise ValueError("an inactive_inventory bank needs inactive_members")
        return self


class BmcProfile(BaseModel):
    """One dialect (see the module docstring)."""

    model_config = _STRICT

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    title: str
    source: str  # where each statement comes from: captures, vendor documentation
    match: Match = Match()
    login: list[LoginMethod] = Field(min_length=1)
    members: list[MemberRule] = []
    push: Push
    activation: Activation = Activation()
    taskless: Taskless
    downgrade: Downgrade = Downgrade()
    bank: Bank = Bank()
    privilege: str = "ConfigureComponents"  # DSP0266 privilege an update needs

    @property
    def reversible(self) -> bool:
        """Whether a flip-back can run the previous image without re-flashing it."""
        return self.bank.kind is not BankKind.NONE


class ProfileError(ValueError):
    """A profile file that does not validate: names the file and the field."""


def parse_profile(text: str, origin: str) -> BmcProfile:
    """One profile from TOML ``text``; :class:`ProfileError` naming ``origin`` and the field."""
    try:
        return BmcProfile.model_validate(tomllib.loads(text))
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{origin}: not TOML: {exc}") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top)"
        raise ProfileError(f"{origin}: {where}: {first['msg']}") from None


@cache
def shipped_profiles() -> tuple[BmcProfile, ...]:
    """Every profile packaged with the library, by id."""
    entries = sorted(resources.files(PROFILES_PACKAGE).iterdir(), key=lambda e: e.name)
    found = [
        parse_profile(e.read_text(encoding="utf-8"), e.name)
        for e in entries
        if e.name.endswith(".toml")
    ]
    ids = [p.id for p in found]
    if len(set(ids)) != len(ids):
        raise ProfileError(f"two shipped profiles share an id: {sorted(ids)}")
    return tuple(sorted(found, key=lambda p: p.id))


def profile_named(profile_id: str) -> BmcProfile:
    """The shipped profile ``profile_id`` (a per-node override); ValueError naming the known."""
    for profile in shipped_profiles():
        if profile.id == profile_id:
            return profile
    known = ", ".join(p.id for p in shipped_profiles())
    raise ValueError(f"no BMC profile {profile_id!r} (known: {known})")


def named_profiles(value: Mapping[str, str]) -> dict[str, str]:
    """A ``bmc_profiles`` setting (a node id or a hardware profile -> a shipped profile id, the
    inventory's, the planner's and the updater's), checked: ValueError naming the key and the
    known ids where a value names no shipped profile."""
    for key, profile_id in value.items():
        try:
            profile_named(profile_id)
        except ValueError as exc:
            raise ValueError(f"bmc_profiles[{key!r}]: {exc}") from None
    return dict(value)


def named_for(value: Mapping[str, str], node_id: str, sku: str) -> str | None:
    """The profile id a ``bmc_profiles`` setting names for a node: its id first, then its
    hardware profile (SKU); None: chosen from what the BMC says."""
    return value.get(node_id) or value.get(sku)
