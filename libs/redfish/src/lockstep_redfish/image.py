"""A firmware image as the write side receives it: the bytes and the SHA-256 they must have.

The caller (the updater) fetches the bytes from an attested bundle and passes the digest
from its manifest; :meth:`FirmwareImage.check` runs right before every send, and a mismatch
fails closed, before anything is sent (design.md non-negotiable 7).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from lockstep_redfish.errors import ImageDigestMismatch

_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True, slots=True, repr=False)
class FirmwareImage:
    """``data`` with its expected ``sha256`` (64 lower-case hex digits) and a ``filename``
    for the multipart ``UpdateFile`` part."""

    data: bytes
    sha256: str
    filename: str = "image.fwpkg"

    def __post_init__(self) -> None:
        if not _SHA256.fullmatch(self.sha256):
            raise ValueError("sha256 must be 64 lower-case hex digits")

    def __repr__(self) -> str:  # never the bytes
        return f"FirmwareImage({self.filename!r}, {len(self.data)} bytes, sha256={self.sha256})"

    def check(self, data: bytes | memoryview | None = None) -> None:
        """Hash ``data`` (default: this image's bytes) now; :class:`ImageDigestMismatch`
        unless it is ``sha256``."""
        actual = hashlib.sha256(self.data if data is None else data).hexdigest()
        if actual != self.sha256:
            raise ImageDigestMismatch(
                f"image {self.filename}: SHA-256 {actual} is not the expected {self.sha256}; "
                "nothing was sent",
                filename=self.filename,
            )
