"""PLDM packages the simulated BMCs accept: a firmware image wrapped for a profile's devices.

A simulated BMC takes a DSP0267 package only when a device record's descriptors match one of its
devices (PCI vendor and device ids, ``profiles.ComponentClass.descriptors``) and the record
names an image for it, as a real BMC's PLDM update agent does. A GB200 tray has two kinds of
NIC (two classes of kind ``nic``): the package carries one record and one image per class of the
kind, so every member the updater targets takes the image.
"""

from __future__ import annotations

from datetime import datetime

from lockstep_common.pldm import ComponentSpec, FormatRevision, RecordSpec, build_package
from lockstep_sim.profiles import PROFILE_CLASSES

PLACEHOLDER_IMAGE = b"\x5a" * 4096
"""The image of a package made without one: the simulator checks the wrapping, not the bits."""


class PackageError(ValueError):
    """A package cannot be made as asked; one line naming what is wrong."""


def kinds_of(profile: str) -> list[str]:
    """The updateable device kinds of ``profile``, sorted."""
    return sorted({c.kind for c in PROFILE_CLASSES[profile] if c.updateable})


def simulated_package(
    profile: str, kind: str, version: str, *, image: bytes | None = None, at: datetime
) -> bytes:
    """A package for every device class of ``kind`` in ``profile``, each record applying the
    same ``image`` (the placeholder when None) at ``version``; released at ``at``."""
    if profile not in PROFILE_CLASSES:
        raise PackageError(f"profile {profile!r}: one of {', '.join(sorted(PROFILE_CLASSES))}")
    classes = [c for c in PROFILE_CLASSES[profile] if c.kind == kind and c.updateable]
    if not classes:
        raise PackageError(
            f"{profile} has no updateable device of kind {kind!r}: one of "
            f"{', '.join(kinds_of(profile))}"
        )
    if image is not None and not image:
        raise PackageError("the image is empty")
    payload = PLACEHOLDER_IMAGE if image is None else image
    return build_package(
        revision=FormatRevision.V1_0,
        version=version,
        release_time=at,
        components=[
            ComponentSpec(image=payload, identifier=c.pldm_component_id, version=version)
            for c in classes
        ],
        device_records=[
            RecordSpec(
                descriptors=list(c.descriptors()), applicable_components=[i], version=version
            )
            for i, c in enumerate(classes)
        ],
    )
