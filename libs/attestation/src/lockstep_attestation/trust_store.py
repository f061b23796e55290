"""Loads a trust store directory (format: docs/bundles.md, "Trust store").

trust.json          manifest-signing keys with validity windows, the revocation list,
                    and where the other anchors are
keys/*.pem          manifest-signing public keys (ES384 P-384 or Ed25519)
rim-anchors/*.pem   roots RIM certificate chains must end in
corim-keys/*.pem    CoRIM signer public keys, named by key id (file stem)
srp-keys/           OCP S.A.F.E. review-provider public keys
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives.serialization import load_pem_public_key
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError

from lockstep_attestation.key_files import load_srp_keys
from lockstep_attestation.trust import Revocations, TrustedKey, TrustStore


class TrustStoreError(ValueError):
    """The trust store cannot be loaded; the message names the file and field."""


class _KeyEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kid: str = Field(min_length=1)
    public_key: str
    not_before: AwareDatetime
    not_after: AwareDatetime


class _RevocationList(BaseModel):
    model_config = ConfigDict(extra="forbid")
    revoked: list[str] = Field(default_factory=list)
    issued_at: AwareDatetime
    next_update: AwareDatetime


class _TrustFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    keys: list[_KeyEntry]
    revocations: _RevocationList | None = None


def load_trust_store(root: Path) -> TrustStore:
    """Read ``root``; raise TrustStoreError naming what is wrong."""
    path = root / "trust.json"
    try:
        spec = _TrustFile.model_validate_json(path.read_bytes())
    except FileNotFoundError:
        raise TrustStoreError(f"{path} is missing") from None
    except ValidationError as exc:
        raise TrustStoreError(f"{path}: {exc}") from None
    keys = {e.kid: TrustedKey(e.kid, _public_key(root / e.public_key), e.not_before, e.not_after)
            for e in spec.keys}  # fmt: skip
    rev = spec.revocations
    return TrustStore(
        keys=keys,
        revocations=Revocations(frozenset(rev.revoked), rev.issued_at, rev.next_update)
        if rev
        else None,
        rim_anchors=tuple(_certificate(p) for p in sorted((root / "rim-anchors").glob("*.pem"))),
        corim_keys={p.stem: _public_key(p) for p in sorted((root / "corim-keys").glob("*.pem"))},
        srp_keys=load_srp_keys(root / "srp-keys"),  # empty when absent: reports then fail
        manifest_anchors=tuple(
            _certificate(p) for p in sorted((root / "manifest-anchors").glob("*.pem"))
        ),
    )


def _public_key(path: Path) -> Any:
    try:
        return load_pem_public_key(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise TrustStoreError(f"{path}: not a PEM public key: {exc}") from None


def _certificate(path: Path) -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise TrustStoreError(f"{path}: not a PEM certificate: {exc}") from None


def describe(store: TrustStore, at: datetime) -> dict[str, Any]:
    """A summary for logs and ``--json`` output (no key material)."""
    return {
        "keys": sorted(store.keys),
        "revocations_fresh": bool(store.revocations and at <= store.revocations.next_update),
        "rim_anchors": len(store.rim_anchors),
        "corim_keys": sorted(store.corim_keys),
    }
