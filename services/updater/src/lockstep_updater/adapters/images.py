"""Image bytes from an attested bundle directory, only below the configured roots.

The updater reads the same bundle the attest service verified (``bundle.attested`` names it);
the caller re-hashes every image against the manifest's SHA-384 right before each push, so a
bundle changed since attestation fails closed. Only unpacked bundle directories are read here.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlparse


class BundleImages:
    """``Images`` over bundle directories below ``roots``."""

    def __init__(self, roots: list[Path]) -> None:
        self.roots = [r.resolve() for r in roots]

    def read(self, bundle_uri: str, image: str) -> bytes:
        parsed = urlparse(bundle_uri)
        if parsed.scheme not in ("", "file") or parsed.netloc not in ("", "localhost"):
            raise ValueError(f"unsupported bundle location {bundle_uri!r} (use a file path)")
        bundle = Path(unquote(parsed.path)).resolve(strict=True)
        if not any(bundle.is_relative_to(root) for root in self.roots):
            raise ValueError("bundle outside the configured bundle roots")
        path = (bundle / image).resolve(strict=True)
        if not path.is_relative_to(bundle) or not path.is_file():
            raise ValueError(f"{image!r} is not a file inside the bundle")
        return path.read_bytes()
