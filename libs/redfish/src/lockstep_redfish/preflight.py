"""What an update asks for, and the checks made on the BMC's own answers before any byte of
it is sent (pure: the I/O is in ``update``).

design.md non-negotiable 4 (read before write; "already at target" is success) and the
UpdateService / SoftwareInventory properties a client must honour (standards.md 1.1, 1.3):
``ServiceEnabled``, ``MaxImageSizeBytes``, ``@Redfish.OperationApplyTimeSupport``, ``Stage``
(UpdateService v1_16_0), and per target ``Updateable``, ``WriteProtected`` and
``LowestSupportedVersion`` (ordered with ``VersionScheme``, see ``lockstep_common.versions``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from lockstep_common.versions import compare_versions
from lockstep_redfish.errors import UpdateRefused
from lockstep_redfish.models import UpdatableSoftware, UpdateService

IMMEDIATE = "Immediate"  # Settings.OperationApplyTime: the default when none is sent


class Method(StrEnum):
    """How the image reaches the BMC."""

    MULTIPART = "multipart"  # POST to MultipartHttpPushUri (UpdateService v1_6_0)
    SIMPLE_UPDATE = "simple_update"  # the BMC pulls ImageURI (UpdateService v1_0_0)


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
    raise UpdateRefused("UpdateService offers neither MultipartHttpPushUri nor SimpleUpdate")


def _supported_apply_times(service: UpdateService, method: Method) -> list[str]:
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
    for path in pending:
        problems += _target_problems(path, members[path], request.version)
    if problems:
        raise UpdateRefused("update refused: " + "; ".join(problems))
    return Preflight(method, uri, pending, before)
