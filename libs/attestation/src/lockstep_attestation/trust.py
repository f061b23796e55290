"""The trust store's rules for manifest-signing keys: validity windows and revocation.

Fail closed (NIST SP 800-147 3.1: updates are authenticated against a root of trust): a key that
is unknown, outside its validity window or revoked is refused, and so is every key when the
revocation list is stale (``now`` past its ``next_update``): "revocation status unknown" is not
"not revoked".
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any


class TrustError(ValueError):
    """A signing key may not be trusted; the message says why."""


@dataclass(frozen=True, slots=True)
class TrustedKey:
    """One manifest-signing key."""

    kid: str
    key: Any  # a cryptography public key
    not_before: datetime
    not_after: datetime


@dataclass(frozen=True, slots=True)
class Revocations:
    """Revoked key ids and the freshness of that list (like a CRL's thisUpdate/nextUpdate)."""

    revoked: frozenset[str]
    issued_at: datetime
    next_update: datetime


@dataclass(frozen=True, slots=True)
class TrustStore:
    """Manifest keys, revocations, and the anchors for the other evidence."""

    keys: dict[str, TrustedKey]
    revocations: Revocations | None
    rim_anchors: tuple[Any, ...]  # x509.Certificate
    corim_keys: dict[str, Any]
    srp_keys: Any  # safe.SrpKeySet
    manifest_anchors: tuple[Any, ...] = ()  # x509.Certificate roots for x5c-signed manifests

    def key_for(self, kid: str | None, at: datetime) -> TrustedKey:
        """The key ``kid`` names, if it may be trusted at ``at``.

        Raises:
            TrustError: unknown, not yet valid, expired, revoked, or revocation status unknown.
        """
        if not kid:
            raise TrustError("signature names no key (no 'kid' header)")
        key = self.keys.get(kid)
        if key is None:
            raise TrustError(f"key {kid!r} is not in the trust store")
        if at < key.not_before:
            raise TrustError(f"key {kid!r} is not valid before {key.not_before.isoformat()}")
        if at > key.not_after:
            raise TrustError(f"key {kid!r} expired at {key.not_after.isoformat()}")
        self.check_not_revoked(kid, f"key {kid!r}", at)
        return key

    def check_not_revoked(self, identity: str, what: str, at: datetime) -> None:
        """Refuse ``identity`` (a key id, or ``sha256:<certificate fingerprint>``) when it is
        revoked or when the revocation list cannot vouch for it at ``at``."""
        rev = self.revocations
        if rev is None:
            raise TrustError(f"revocation status of {what} unknown: the trust store has no list")
        if at > rev.next_update:
            raise TrustError(
                f"revocation status of {what} unknown: the list was due for renewal at "
                f"{rev.next_update.isoformat()}"
            )
        if identity in rev.revoked:
            raise TrustError(f"{what} is revoked")
