"""The manifest signature check: a detached JWS by a trusted key, or by a certificate chain
that validates to a trusted manifest anchor (RFC 7515 Appendix F and section 4.1.6)."""

from __future__ import annotations

import base64
from datetime import datetime
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes

from lockstep_attestation import jws
from lockstep_attestation.evidence import LoadedBundle
from lockstep_attestation.findings import Finding
from lockstep_attestation.trust import TrustError, TrustStore
from lockstep_attestation.x509chain import ChainError, validate_chain
from lockstep_common.bundle import signed_bytes

MANIFEST_ALGORITHMS = frozenset({"ES384", "EdDSA"})


def manifest_signature(b: LoadedBundle, trust: TrustStore, at: datetime) -> list[Finding]:
    """manifest.jws is a valid detached signature over the canonical manifest by a trusted key."""
    if b.signature is None:
        return [Finding("signature", False, "manifest.jws is missing")]
    try:
        token = jws.parse_compact(
            b.signature.strip(), detached_payload=signed_bytes(b.manifest_json)
        )
        if "x5c" in token.header:
            key, signer = _chain_key(token.header["x5c"], trust, at)
        else:
            key, signer = trust.key_for(token.kid, at).key, str(token.kid)
        jws.verify(token, key, allowed=MANIFEST_ALGORITHMS)
    except (jws.JwsError, TrustError, ChainError, ValueError) as exc:
        return [Finding("signature", False, f"manifest.jws: {exc}")]
    return [Finding("signature", True, f"signed by {signer} ({token.alg})")]


def _chain_key(x5c: object, trust: TrustStore, at: datetime) -> tuple[Any, str]:
    """The signing key from an ``x5c`` chain (RFC 7515 section 4.1.6: base64 DER, leaf first)
    that validates to a manifest anchor at ``at`` and whose leaf is not revoked."""
    if not isinstance(x5c, list) or not x5c or not all(isinstance(c, str) for c in x5c):
        raise TrustError("x5c must be a non-empty list of base64 DER certificates")
    try:
        certs = [x509.load_der_x509_certificate(base64.b64decode(c, validate=True)) for c in x5c]
    except ValueError as exc:
        raise TrustError(f"x5c holds an unreadable certificate: {exc}") from None
    if not trust.manifest_anchors:
        raise TrustError("the manifest carries a certificate chain but no anchor is trusted for it")
    errors = []
    for anchor in trust.manifest_anchors:
        try:
            leaf = validate_chain(certs, anchor=anchor, at=at)
        except ChainError as exc:
            errors.append(str(exc))
            continue
        fingerprint = "sha256:" + leaf.fingerprint(hashes.SHA256()).hex()
        subject = leaf.subject.rfc4514_string()
        trust.check_not_revoked(fingerprint, f"certificate {subject} ({fingerprint})", at)
        return leaf.public_key(), subject
    raise TrustError("certificate chain: " + "; ".join(errors))
