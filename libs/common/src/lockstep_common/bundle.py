"""The bundle manifest: what a release contains, per hardware profile (docs/bundles.md).

Shared because attest verifies it, the planner pins its golden stack, and the updater reads the
image, bank and activation facts of every component from it.
"""

from __future__ import annotations

import enum
import re
from datetime import datetime
from pathlib import PurePosixPath
from typing import Annotated, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator, model_validator

from lockstep_common.canonical import canonical_json, stack_hash
from lockstep_common.vocabulary import Component

MANIFEST_FILE = "manifest.json"
SIGNATURE_FILE = "manifest.jws"
SCHEMA = "lockstep.bundle/v1"

Sha384Hex = Annotated[str, Field(pattern=r"^[0-9a-f]{96}$", description="SHA-384, lower-case hex.")]
Name = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")]
Ver = Annotated[str, Field(min_length=1, max_length=128)]


def _relative_path(value: str, folder: str) -> str:
    path = PurePosixPath(value)
    if path.is_absolute() or ".." in path.parts or not value.startswith(f"{folder}/"):
        raise ValueError(f"{value!r} must be a relative path inside {folder}/")
    if not re.fullmatch(r"[A-Za-z0-9._/-]+", value):
        raise ValueError(f"{value!r} has characters outside [A-Za-z0-9._/-]")
    return value


class Banks(enum.StrEnum):
    """Whether a failed activation can be undone by flipping banks."""

    AB = "ab"
    ONE_WAY = "one_way"


class ImageFormat(enum.StrEnum):
    """How the image is packaged."""

    PLDM = "pldm"
    VENDOR = "vendor"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class DeviceDescriptor(_Strict):
    """A PLDM descriptor the target device reports (DSP0267 descriptor types)."""

    type: Annotated[int, Field(ge=0, le=0xFFFF)] = Field(
        description="Descriptor type, e.g. 0 (PCI vendor)."
    )
    value_hex: Annotated[str, Field(pattern=r"^([0-9a-f]{2})+$")] = Field(description="Raw value.")


class ComponentEntry(_Strict):
    """One component of a profile's golden stack."""

    version: Ver = Field(description="Exact version to run.")
    image: str = Field(description="Path of the image under images/.")
    sha384: Sha384Hex = Field(description="SHA-384 of the image file.")
    size: int = Field(ge=0, description="Image size in bytes.")
    format: ImageFormat = Field(description="pldm or vendor.")
    banks: Banks = Field(description="ab (rollback by bank flip) or one_way.")
    activation: Literal["immediate", "reset", "ac_cycle", "reboot", "in_band"] = Field(
        description="What makes the new image live."
    )
    lowest_supported_version: Ver | None = Field(
        default=None,
        description="The device refuses anything older (Redfish LowestSupportedVersion).",
    )
    security_version: int | None = Field(default=None, ge=0, description="Anti-rollback counter.")
    device: tuple[DeviceDescriptor, ...] = Field(
        default=(),
        description="Descriptors of the target device (PLDM images must match one record).",
    )
    rim: str | None = Field(default=None, description="Path of the image's RIM under rim/.")
    safe: tuple[str, ...] = Field(default=(), description="Paths of S.A.F.E. reports under safe/.")

    @field_validator("image")
    @classmethod
    def _image(cls, v: str) -> str:
        return _relative_path(v, "images")

    @field_validator("rim")
    @classmethod
    def _rim(cls, v: str | None) -> str | None:
        return None if v is None else _relative_path(v, "rim")

    @field_validator("safe")
    @classmethod
    def _safe(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(_relative_path(p, "safe") for p in v)


class Manifest(_Strict):
    """``manifest.json``: signed (canonical JSON) by ``manifest.jws``."""

    schema_: Literal["lockstep.bundle/v1"] = Field(alias="schema", description="Format id.")
    bundle_id: Name = Field(description="Stable name of the release line, e.g. gb200-golden.")
    bundle_version: Ver = Field(description="Version of this bundle.")
    created_at: AwareDatetime = Field(description="When the bundle was built.")
    profiles: dict[Name, dict[Component, ComponentEntry]] = Field(
        min_length=1, description="Per hardware profile, the golden stack."
    )
    sbom: Literal["sbom.cdx.json"] = Field(default="sbom.cdx.json", description="CycloneDX SBOM.")
    sbom_sha384: Sha384Hex = Field(
        description="SHA-384 of the SBOM: it has no signature of its own, so the manifest binds it."
    )

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, validate_by_name=True)

    @model_validator(mode="after")
    def _one_image_one_digest(self) -> Manifest:
        seen: dict[str, tuple[str, int]] = {}
        for profile, comps in self.profiles.items():
            if not comps:
                raise ValueError(f"profile {profile} lists no components")
            for comp, entry in comps.items():
                known = seen.setdefault(entry.image, (entry.sha384, entry.size))
                if known != (entry.sha384, entry.size):
                    raise ValueError(
                        f"{profile}/{comp.value}: {entry.image} is listed with two digests or sizes"
                    )
        return self

    def stack(self) -> dict[str, dict[str, str]]:
        """Profile -> component -> version: the golden stack."""
        return {
            p: {c.value: e.version for c, e in comps.items()} for p, comps in self.profiles.items()
        }

    def stack_hash(self) -> str:
        """The canonical SHA-256 of ``stack()``."""
        return stack_hash(self.stack())

    def images(self) -> dict[str, tuple[str, int]]:
        """Image path -> (sha384, size), each image once."""
        return {
            e.image: (e.sha384, e.size) for comps in self.profiles.values() for e in comps.values()
        }

    def older_than(self, created_at: datetime) -> bool:
        """Whether this bundle was built before ``created_at``."""
        return self.created_at < created_at


def signed_bytes(manifest_json: object) -> bytes:
    """What ``manifest.jws`` signs: the canonical JSON of manifest.json as parsed (not as our
    model would re-serialise it, so that any JSON producer can build a bundle)."""
    return canonical_json(manifest_json)
