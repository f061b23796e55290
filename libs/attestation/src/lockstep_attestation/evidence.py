"""What the bundle reader found, handed to the checks: facts, never file handles.

The reader (``adapters/bundle_reader.py``) reads every file once; the checks in ``checks.py``
decide on these facts alone, which keeps them pure and testable without files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lockstep_common.bundle import Manifest
from lockstep_common.pldm import PldmPackage


@dataclass(frozen=True, slots=True)
class ImageFacts:
    """One file under images/, as read."""

    path: str
    size: int
    sha384: str
    sha512: str | None = None
    pldm: PldmPackage | None = None  # parsed (checksums verified) when the manifest says pldm
    pldm_error: str | None = None


@dataclass(frozen=True, slots=True)
class LoadedBundle:
    """Everything the checks need.

    ``manifest_json`` is the parsed manifest.json (what is signed, in canonical form);
    ``manifest`` is its validated model, or None with ``manifest_error`` saying why.
    """

    source: str
    manifest_json: Any
    manifest: Manifest | None
    manifest_error: str | None
    signature: str | None
    images: dict[str, ImageFacts]
    documents: dict[str, bytes]  # rim/*, safe/*, sbom.cdx.json: small files, read whole
    unlisted: tuple[str, ...] = ()  # files present but named by nothing in the manifest
    missing: tuple[str, ...] = ()  # files the manifest names that are absent
    digest: str = ""  # SHA-256 over every file's path and SHA-384: the verdict cache key
    read_errors: dict[str, str] = field(default_factory=dict)
