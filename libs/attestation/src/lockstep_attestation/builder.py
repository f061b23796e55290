"""``lockstep bundle build``: fill in digests and sizes, then sign the canonical manifest.

The input is a bundle directory whose ``manifest.json`` names each component's image (sha384
and size may be left out); the output is the same directory with the completed
``manifest.json`` and its detached signature ``manifest.jws`` (RFC 7515 Appendix F).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from lockstep_attestation import jws
from lockstep_common.bundle import MANIFEST_FILE, SIGNATURE_FILE, Manifest, signed_bytes


class BuildError(ValueError):
    """The bundle cannot be built; the message names the file or field."""


def load_signing_key(path: Path) -> tuple[Any, str]:
    """A PEM private key and the JWS algorithm it signs with (ES384 or EdDSA)."""
    try:
        key = load_pem_private_key(path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise BuildError(f"{path}: not an unencrypted PEM private key: {exc}") from None
    if isinstance(key, ec.EllipticCurvePrivateKey) and isinstance(key.curve, ec.SECP384R1):
        return key, "ES384"
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return key, "EdDSA"
    raise BuildError(f"{path}: manifest keys must be ECDSA P-384 (ES384) or Ed25519 (EdDSA)")


def _sha384(path: Path) -> tuple[str, int]:
    h, size = hashlib.sha384(), 0
    with path.open("rb") as f:
        while chunk := f.read(8 << 20):
            h.update(chunk)
            size += len(chunk)
    return h.hexdigest(), size


def build_bundle(root: Path, key_path: Path, kid: str) -> Manifest:
    """Complete and sign ``root/manifest.json`` in place; returns the validated manifest."""
    key, alg = load_signing_key(key_path)
    try:
        doc = json.loads((root / MANIFEST_FILE).read_bytes())
    except (OSError, ValueError) as exc:
        raise BuildError(f"{root / MANIFEST_FILE}: {exc}") from None
    digests: dict[str, tuple[str, int]] = {}
    for profile, comps in (doc.get("profiles") or {}).items():
        for comp, entry in comps.items():
            image = entry.get("image")
            if not isinstance(image, str) or not (root / image).is_file():
                raise BuildError(f"{profile}/{comp}: image {image!r} not found under {root}")
            if image not in digests:
                digests[image] = _sha384(root / image)
            entry["sha384"], entry["size"] = digests[image]
    sbom = root / doc.get("sbom", "sbom.cdx.json")
    if not sbom.is_file():
        raise BuildError(f"{sbom} not found: a bundle carries a CycloneDX SBOM")
    doc["sbom_sha384"] = _sha384(sbom)[0]
    text = json.dumps(doc, indent=2, sort_keys=True) + "\n"
    try:
        manifest = Manifest.model_validate_json(text)
    except ValueError as exc:
        raise BuildError(f"manifest.json is invalid: {exc}") from None
    (root / MANIFEST_FILE).write_text(text)
    token = jws.sign_compact(signed_bytes(json.loads(text)), key, alg=alg, kid=kid, detached=True)
    (root / SIGNATURE_FILE).write_text(token + "\n")
    return manifest
