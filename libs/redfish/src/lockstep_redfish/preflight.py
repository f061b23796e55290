"""What an update asks for, and the checks made on the BMC's own answers before any byte of
it is sent (pure: the I/O is in ``update``).

design.md non-negotiable 4 (read before write; "already at target" is success) and the
UpdateService / SoftwareInventory properties a client must honour (standards.md 1.1, 1.3):
``ServiceEnabled``, ``MaxImageSizeBytes``, ``@Redfish.OperationApplyTimeSupport``, ``Stage``
(UpdateService v1_16_0), and per target ``Updateable``, ``WriteProtected`` and
``LowestSupportedVersion`` (ordered with ``VersionScheme``, see ``lockstep_common.versions``).

``profile_refusals`` checks what the BMC's profile allows (``lockstep_redfish.profile``), for
every component of a rollout at once, before any node is drained: one line per refusal naming
the BMC, the profile and what is missing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from lockstep_common.versions import compare_versions
from lockstep_common.vocabulary import Component
from lockstep_redfish.errors import UpdateRefused
from lockstep_redfish.models import UpdatableSoftware, UpdateService
from lockstep_redfish.privileges import account_refusal
from lockstep_redfish.profile import BmcProfile, DowngradeMode, LoginMethod, PushMethod
from lockstep_redfish.selection import BmcFacts, MemberFacts, Selection, map_member

IMMEDIATE = "Immediate"  # Settings.OperationApplyTime: the default when none is sent


class Method(StrEnum):
    """How the image reaches the BMC."""

    MULTIPART = "multipart"  # POST to MultipartHttpPushUri (UpdateService v1_6_0)
    SIMPLE_UPDATE = "simple_update"  # the BMC pulls ImageURI (UpdateService v1_0_0)
    HTTP_PUSH = "http_push"  # POST of the bare image to HttpPushUri (DSP0266 "HTTP push update")


@dataclass(frozen=True, slots=True)
class UpdateRequest:
    """One image onto named FirmwareInventory members.

    ``targets`` are member paths (``/redfish/v1/UpdateService/FirmwareInventory/HGX_FW_GPU_0``);
    never empty, because an empty ``Targets`` means "every applicable device" to a Redfish
    service (UpdateService ``SimpleUpdate`` ``Targets``), a blast radius nobody chose.
    ``version`` is the version the image carries for them, compared with what they report.
    ``apply_time`` is sent as ``@Redfish.OperationApplyTime``; ``stage`` as ``Stage``.
    """

    targets: tuple[str, ...]
    version: str
    apply_time: str = IMMEDIATE
    stage: bool = False

    def __post_init__(self) -> None:
        if not self.targets:
            raise ValueError("an update needs at least one target")
        if not all(t.startswith("/") for t in self.targets):
            raise ValueError("targets are paths on the BMC, starting with '/'")
        if not self.version:
            raise ValueError("an update needs the version the image carries")


@dataclass(frozen=True, slots=True)
class Preflight:
    """What the checks decided: the method and where it goes, and which targets still need
    the image."""

    method: Method
    uri: str  # MultipartHttpPushUri, or the SimpleUpdate action's target
    pending: tuple[str, ...]  # targets whose Version is not yet the requested one
    before: Mapping[str, str | None]  # every target's Version as read


def _method(service: UpdateService) -> tuple[Method, str]:
    if service.MultipartHttpPushUri:
        return Method.MULTIPART, service.MultipartHttpPushUri
    if service.simple_update is not None:
        return Method.SIMPLE_UPDATE, service.simple_update.target
    if service.HttpPushUri:
        return Method.HTTP_PUSH, service.HttpPushUri
    raise UpdateRefused(
        "UpdateService offers neither MultipartHttpPushUri nor SimpleUpdate nor HttpPushUri"
    )


def _http_push_problems(service: UpdateService, request: UpdateRequest) -> list[str]:
    """An HTTP push names its targets only through ``HttpPushUriTargets`` (PATCHed first):
    a service without it would apply the image to whatever it chose, a blast radius nobody
    chose; one reserved by another client (``HttpPushUriTargetsBusy``) is not taken over."""
    problems = []
    if service.HttpPushUriTargets is None:
        problems.append("HttpPushUri without HttpPushUriTargets cannot be told its targets")
    if service.HttpPushUriTargetsBusy is True:
        problems.append("HttpPushUriTargets is reserved by another client (Busy)")
    if request.stage:
        problems.append("Stage cannot be sent with an HttpPushUri push")
    return problems


def _supported_apply_times(service: UpdateService, method: Method) -> list[str]:
    if method is Method.HTTP_PUSH:
        return service.http_push_apply_times or [IMMEDIATE]
    support = (
        service.multipart_apply_times
        if method is Method.MULTIPART
        else (service.simple_update.apply_times if service.simple_update else None)
    )
    # Not advertised: only the default is known to work (DSP0266 "Operation apply time").
    return support.SupportedValues if support is not None else [IMMEDIATE]


def _target_problems(path: str, member: UpdatableSoftware, version: str) -> list[str]:
    problems: list[str] = []
    if member.Version is None:
        problems.append(f"{path} reports no Version (the device does not answer its BMC)")
    if member.Updateable is False:
        problems.append(f"{path} is not Updateable")
    if member.WriteProtected is True:
        problems.append(f"{path} is WriteProtected")
    lowest = member.LowestSupportedVersion
    if lowest is not None:
        order = compare_versions(version, lowest, member.VersionScheme)
        if order is None:
            problems.append(
                f"{path}: version {version!r} cannot be ordered against "
                f"LowestSupportedVersion {lowest!r}"
            )
        elif order < 0:
            problems.append(
                f"{path}: version {version!r} is below LowestSupportedVersion {lowest!r}"
            )
    return problems


def preflight(
    service: UpdateService,
    members: Mapping[str, UpdatableSoftware],
    request: UpdateRequest,
    image_size: int,
) -> Preflight:
    """The method and the pending targets; :class:`UpdateRefused` naming every problem.

    Targets already at ``request.version`` are not checked further: nothing will be written
    to them. ``members`` holds every target of ``request``.
    """
    before = {path: members[path].Version for path in request.targets}
    pending = tuple(path for path in request.targets if before[path] != request.version)
    method, uri = _method(service)
    if not pending:
        return Preflight(method, uri, (), before)
    problems: list[str] = []
    if service.ServiceEnabled is False:
        problems.append("UpdateService is disabled (ServiceEnabled false)")
    limit = service.MaxImageSizeBytes
    if limit is not None and image_size > limit:
        problems.append(f"the image is {image_size} bytes, over MaxImageSizeBytes {limit}")
    supported = _supported_apply_times(service, method)
    if request.apply_time not in supported:
        problems.append(
            f"@Redfish.OperationApplyTime {request.apply_time!r} is not offered for {method} "
            f"(supported: {', '.join(supported)})"
        )
    if request.stage and not service.supports_stage:
        problems.append(f"Stage needs UpdateService v1_16_0, the BMC has {service.odata_type}")
    if method is Method.HTTP_PUSH:
        problems += _http_push_problems(service, request)
    for path in pending:
        problems += _target_problems(path, members[path], request.version)
    if problems:
        raise UpdateRefused("update refused: " + "; ".join(problems))
    return Preflight(method, uri, pending, before)


# -- what the BMC's profile allows, checked before any drain --------------------------------


@dataclass(frozen=True, slots=True)
class Intent:
    """One component a rollout would flash on a BMC: the version and the image's size (None
    when not known yet, as in ``lockstep bmc probe``)."""

    component: Component
    version: str | None = None
    image_size: int | None = None


def offered_push_methods(service: Mapping[str, Any] | None) -> list[PushMethod]:
    """The push methods ``service`` (an UpdateService document) offers (DSP0268 UpdateService:
    ``MultipartHttpPushUri`` v1_6_0, ``HttpPushUri``, the ``SimpleUpdate`` action)."""
    if not service:
        return []
    actions = service.get("Actions")
    found = {
        PushMethod.MULTIPART: isinstance(service.get("MultipartHttpPushUri"), str),
        PushMethod.HTTP_PUSH: isinstance(service.get("HttpPushUri"), str),
        PushMethod.SIMPLE_UPDATE: isinstance(actions, dict)
        and "#UpdateService.SimpleUpdate" in actions,
    }
    return [method for method, offered in found.items() if offered]


def push_method(profile: BmcProfile, service: Mapping[str, Any] | None) -> PushMethod | None:
    """The profile's first push method the BMC offers; None when it offers none of them."""
    offered = offered_push_methods(service)
    return next((m for m in profile.push.methods if m in offered), None)


def _downgrades(intent: Intent, running: list[MemberFacts]) -> list[str]:
    if intent.version is None:
        return []
    return [
        f"{m.id} {m.version} -> {intent.version}"
        for m in running
        if m.version is not None and (compare_versions(intent.version, m.version) or 0) < 0
    ]


def profile_refusals(
    bmc: str,
    selection: Selection,
    facts: BmcFacts,
    intents: Sequence[Intent],
    *,
    login: LoginMethod,
    privileges: frozenset[str] | None,
    rollback_approved: bool = False,
) -> list[str]:
    """Why the BMC ``bmc`` must not be flashed as ``intents`` ask, one line each, naming the
    BMC, the profile and what is missing; empty when nothing stands in the way. Pure: made
    before any node is cordoned, from what was read (``privileges`` None: not readable).

    Refused: an account without a privilege the profile's calls need (DSP8011) or with an
    administrative one they do not need (``privileges.account_refusal``), a login
    the profile does not allow, a component no member holds, a BMC that offers none of the
    profile's push methods, an image over ``MaxImageSizeBytes``, and a downgrade without a
    signed rollback approval (or one the profile cannot force).
    """
    profile = selection.profile
    head = f"BMC {bmc} (profile {profile.id})"
    lines: list[str] = []
    account = account_refusal(profile, privileges)
    if account is not None:
        lines.append(f"{head}: {account}")
    if login not in profile.login:
        allowed = ", ".join(profile.login)
        lines.append(f"{head}: login by {login} is not allowed by the profile (allowed: {allowed})")
    if facts.update_service is None:
        lines.append(f"{head}: the BMC has no UpdateService")
    elif push_method(profile, facts.update_service) is None:
        wanted = ", ".join(profile.push.methods)
        offered = ", ".join(offered_push_methods(facts.update_service)) or "none"
        lines.append(
            f"{head}: the BMC offers none of the profile's push methods ({wanted}; it offers: "
            f"{offered})"
        )
    limit = (facts.update_service or {}).get("MaxImageSizeBytes")
    for intent in intents:
        running = [m for m in facts.members if map_member(profile, m).component is intent.component]
        if not running:
            lines.append(f"{head}: no FirmwareInventory member holds {intent.component}")
        size = intent.image_size
        if isinstance(limit, int) and size is not None and size > limit:
            lines.append(
                f"{head}: the {intent.component} image is {size} bytes, over the BMC's "
                f"MaxImageSizeBytes {limit}"
            )
        down = _downgrades(intent, running)
        if down and not rollback_approved:
            lines.append(
                f"{head}: {intent.component} would be downgraded ({'; '.join(down)}) without a "
                "signed rollback approval"
            )
        elif down and profile.downgrade.mode is DowngradeMode.REFUSED:
            lines.append(
                f"{head}: {intent.component} would be downgraded ({'; '.join(down)}) and the "
                "profile allows no downgrade"
            )
    return lines


def refuse_if_any(lines: Sequence[str]) -> None:
    """:class:`UpdateRefused` carrying every line, when there is one."""
    if lines:
        raise UpdateRefused("\n".join(lines))


# DSP8011 (Redfish privilege registry, Redfish_1.x.x_PrivilegeRegistry): PATCH of a Manager
# and POST of its actions (Manager.Reset) need ConfigureManager; PATCH of a ComputerSystem, its
# Bios or a Chassis, and their Reset actions, need ConfigureComponents.
MANAGERS = "/redfish/v1/Managers/"


def write_privilege(path: str) -> str:
    """The privilege DSP8011's registry gives a write (PATCH, or an action's POST) to ``path``."""
    return "ConfigureManager" if path.startswith(MANAGERS) else "ConfigureComponents"


def write_refusals(
    head: str, writes: Sequence[str], privileges: frozenset[str] | None, what: str
) -> list[str]:
    """One line, headed ``head``, where the account's ``privileges`` (None: not readable) lack
    what ``writes`` (the paths ``what`` would PATCH or POST to) need; empty otherwise."""
    needed = {path: write_privilege(path) for path in writes}
    if privileges is None:
        wanted = ", ".join(sorted(set(needed.values())))
        return [f"{head}: the account's privileges cannot be read; {what} needs {wanted}"]
    missing = {path: p for path, p in needed.items() if p not in privileges}
    if not missing:
        return []
    held = ", ".join(sorted(privileges)) or "none"
    lacks = "; ".join(f"{p} for {path}" for path, p in missing.items())
    return [f"{head}: the account lacks what {what} needs (DSP8011: {lacks}; it holds: {held})"]
