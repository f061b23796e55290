"""Compact JWS (RFC 7515) with the RFC 7518 / RFC 8037 signature algorithms, on ``cryptography``.

The algorithm layer (:func:`check_key`, :func:`verify_signature`, :func:`create_signature`) is
shared with :mod:`lockstep_attestation.cose`: RFC 9053 section 2 uses the same ECDSA ``r||s``
encoding, the same RSA-PSS parameters (RFC 8230) and the same EdDSA as JOSE.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes, PublicKeyTypes
from cryptography.hazmat.primitives.asymmetric.utils import (
    decode_dss_signature,
    encode_dss_signature,
)

from lockstep_attestation.keys import KeyLoadError, b64url_decode, b64url_encode, describe_key


class JwsError(ValueError):
    """A JWS is malformed, uses a refused algorithm, or does not verify; the message says which."""


ALGORITHMS: frozenset[str] = frozenset(
    {"ES256", "ES384", "ES512", "PS256", "PS384", "PS512", "EdDSA"}
)

# RFC 7518 section 3.4: ECDSA "ESxxx" fixes curve and hash; the signature is r||s, each
# coordinate-sized (32, 48, 66 bytes).
_ECDSA: Mapping[str, tuple[str, hashes.HashAlgorithm, int]] = {
    "ES256": ("secp256r1", hashes.SHA256(), 32),
    "ES384": ("secp384r1", hashes.SHA384(), 48),
    "ES512": ("secp521r1", hashes.SHA512(), 66),
}
_CURVE_NAMES = {"secp256r1": "P-256", "secp384r1": "P-384", "secp521r1": "P-521"}
# RFC 7518 section 3.5: RSASSA-PSS, MGF1 with the same hash, salt length = hash length.
_PSS: Mapping[str, hashes.HashAlgorithm] = {
    "PS256": hashes.SHA256(),
    "PS384": hashes.SHA384(),
    "PS512": hashes.SHA512(),
}
_MIN_RSA_BITS = 2048  # RFC 7518 sections 3.3 and 3.5


@dataclass(frozen=True, slots=True)
class Jws:
    """A parsed (not yet verified) compact JWS."""

    header: dict[str, Any]
    payload: bytes
    signing_input: bytes
    signature: bytes

    @property
    def alg(self) -> str:
        """The ``alg`` header (always a string; parse_compact checks)."""
        return str(self.header["alg"])

    @property
    def kid(self) -> str | None:
        """The ``kid`` header, if any."""
        kid = self.header.get("kid")
        return kid if isinstance(kid, str) else None


def check_key(alg: str, key: object, *, min_rsa_bits: int = _MIN_RSA_BITS) -> None:
    """Refuse a key that does not fit ``alg`` (curve for ES*, size for PS*, Ed25519 for EdDSA).

    Raises:
        JwsError: unknown alg or key mismatch, naming both.
    """
    if alg in _ECDSA:
        curve = _ECDSA[alg][0]
        ok = (
            isinstance(key, ec.EllipticCurvePublicKey | ec.EllipticCurvePrivateKey)
            and key.curve.name == curve
        )
        need = f"an EC {_CURVE_NAMES[curve]} key"
    elif alg in _PSS:
        ok = isinstance(key, rsa.RSAPublicKey | rsa.RSAPrivateKey) and key.key_size >= min_rsa_bits
        need = f"an RSA key of at least {min_rsa_bits} bits"
    elif alg == "EdDSA":  # RFC 8037: only Ed25519 is accepted here (Ed448 refused)
        ok = isinstance(key, ed25519.Ed25519PublicKey | ed25519.Ed25519PrivateKey)
        need = "an Ed25519 key"
    else:
        raise JwsError(f"alg {alg!r} is not supported")
    if not ok:
        raise JwsError(f"alg {alg} needs {need}, got {describe_key(key)}")


def verify_signature(
    alg: str,
    key: PublicKeyTypes,
    data: bytes,
    signature: bytes,
    *,
    min_rsa_bits: int = _MIN_RSA_BITS,
) -> None:
    """Check one raw signature of ``data`` under ``alg`` (JOSE name) and ``key``.

    Raises:
        JwsError: key/alg mismatch, wrong signature length, or a signature that does not verify.
    """
    check_key(alg, key, min_rsa_bits=min_rsa_bits)
    try:
        if isinstance(key, ec.EllipticCurvePublicKey):
            _, digest, size = _ECDSA[alg]
            if len(signature) != 2 * size:
                raise JwsError(f"{alg} signature must be {2 * size} bytes, got {len(signature)}")
            r = int.from_bytes(signature[:size], "big")
            s = int.from_bytes(signature[size:], "big")
            key.verify(encode_dss_signature(r, s), data, ec.ECDSA(digest))
        elif isinstance(key, rsa.RSAPublicKey):
            if len(signature) != (key.key_size + 7) // 8:
                raise JwsError(f"{alg} signature length {len(signature)} does not fit the key")
            key.verify(signature, data, _pss(_PSS[alg]), _PSS[alg])
        elif isinstance(key, ed25519.Ed25519PublicKey):
            key.verify(signature, data)
        else:  # check_key accepted a private key: verification needs the public half
            raise JwsError(f"{alg} verification needs a public key, got {describe_key(key)}")
    except InvalidSignature:
        raise JwsError(f"{alg} signature does not verify with {describe_key(key)}") from None


def create_signature(alg: str, key: PrivateKeyTypes, data: bytes) -> bytes:
    """Sign ``data`` with ``alg`` (JOSE name); ECDSA output is the raw ``r||s`` form.

    Raises:
        JwsError: unknown alg or key mismatch.
    """
    check_key(alg, key)
    if isinstance(key, ec.EllipticCurvePrivateKey):
        _, digest, size = _ECDSA[alg]
        r, s = decode_dss_signature(key.sign(data, ec.ECDSA(digest)))
        return r.to_bytes(size, "big") + s.to_bytes(size, "big")
    if isinstance(key, rsa.RSAPrivateKey):
        return key.sign(data, _pss(_PSS[alg]), _PSS[alg])
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return key.sign(data)
    raise JwsError(f"{alg} signing needs a private key, got {describe_key(key)}")


def _pss(digest: hashes.HashAlgorithm) -> padding.PSS:
    return padding.PSS(mgf=padding.MGF1(digest), salt_length=digest.digest_size)


def parse_compact(token: str | bytes, *, detached_payload: bytes | None = None) -> Jws:
    """Parse ``header.payload.signature`` (RFC 7515 section 7.1) without verifying it.

    Args:
        token: the compact serialization; surrounding ASCII whitespace is ignored.
        detached_payload: the payload of a detached JWS (RFC 7515 Appendix F); the token's
            middle segment must then be empty.

    Raises:
        JwsError: naming the segment or header member that is malformed.
    """
    if isinstance(token, bytes):
        try:
            token = token.decode("ascii")
        except UnicodeDecodeError:
            raise JwsError("JWS is not ASCII text") from None
    parts = token.strip(" \t\r\n").split(".")
    if len(parts) != 3:
        raise JwsError(f"JWS must have 3 segments separated by '.', got {len(parts)}")
    head_b64, body_b64, sig_b64 = parts
    header = _header(_segment(head_b64, "header"))
    if detached_payload is not None:
        if body_b64:
            raise JwsError("detached JWS must have an empty payload segment (RFC 7515 App. F)")
        body_b64, payload = b64url_encode(detached_payload), detached_payload
    else:
        payload = _segment(body_b64, "payload")
    return Jws(
        header=header,
        payload=payload,
        signing_input=f"{head_b64}.{body_b64}".encode("ascii"),
        signature=_segment(sig_b64, "signature"),
    )


def _segment(text: str, name: str) -> bytes:
    try:
        return b64url_decode(text, what=f"JWS {name} segment")
    except KeyLoadError as exc:
        raise JwsError(str(exc)) from None


def loads_json(raw: bytes) -> Any:
    """Strict JSON: UTF-8, and a duplicate member anywhere is an error (RFC 7515 section 5.2
    step 4 allows refusing it; a duplicate could read differently in another parser).

    Raises:
        ValueError: not UTF-8 JSON, or a duplicate member.
    """
    return json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates)


def _header(raw: bytes) -> dict[str, Any]:
    try:
        header = loads_json(raw)
    except ValueError as exc:
        raise JwsError(f"JWS header is not JSON: {exc}") from None
    if not isinstance(header, dict):
        raise JwsError("JWS header is not a JSON object")
    if not isinstance(header.get("alg"), str):
        raise JwsError("JWS header has no string 'alg'")
    if "kid" in header and not isinstance(header["kid"], str):
        raise JwsError("JWS header 'kid' is not a string")
    if "crit" in header:  # RFC 7515 section 4.1.11: we understand no extension, so refuse
        raise JwsError(f"JWS header 'crit' {header['crit']!r} is not supported")
    return header


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in pairs:
        if name in out:
            raise ValueError(f"duplicate member {name!r}")
        out[name] = value
    return out


def verify(
    jws: Jws,
    key: PublicKeyTypes,
    *,
    allowed: frozenset[str],
    min_rsa_bits: int = _MIN_RSA_BITS,
) -> None:
    """Verify ``jws`` with ``key``; the header's alg must be allowed and fit the key.

    Args:
        jws: from :func:`parse_compact`.
        key: the public key; its type and curve must be the one ``alg`` names.
        allowed: the algorithms the caller accepts; ``none`` is refused regardless.
        min_rsa_bits: floor for PS* keys (OCP S.A.F.E. reports use 3072).

    Raises:
        JwsError: naming the alg, kid or signature problem.
    """
    alg, kid = jws.alg, jws.kid
    if alg.lower() == "none":  # RFC 7518 section 3.6: unsecured JWS is never acceptable here
        raise JwsError(f"alg 'none' is refused (kid {kid!r})")
    if alg not in ALGORITHMS or alg not in allowed:
        raise JwsError(f"alg {alg!r} is not allowed (kid {kid!r}; allowed: {sorted(allowed)})")
    try:
        verify_signature(alg, key, jws.signing_input, jws.signature, min_rsa_bits=min_rsa_bits)
    except JwsError as exc:
        raise JwsError(f"kid {kid!r}: {exc}") from None


def sign_compact(
    payload: bytes,
    key: PrivateKeyTypes,
    *,
    alg: str,
    kid: str,
    detached: bool = False,
    extra_header: Mapping[str, Any] | None = None,
) -> str:
    """Produce a compact JWS; with ``detached`` the payload segment is left empty (App. F).

    Raises:
        JwsError: unsupported alg, key mismatch, or ``extra_header`` overriding alg/kid/crit.
    """
    if alg not in ALGORITHMS:
        raise JwsError(f"alg {alg!r} is not supported for signing")
    extra = dict(extra_header or {})
    clash = {"alg", "kid", "crit"} & extra.keys()
    if clash:
        raise JwsError(f"extra_header may not set {sorted(clash)}")
    header = {"alg": alg, "kid": kid, **extra}
    head_b64 = b64url_encode(json.dumps(header, separators=(",", ":")).encode("utf-8"))
    body_b64 = b64url_encode(payload)
    signature = create_signature(alg, key, f"{head_b64}.{body_b64}".encode("ascii"))
    return f"{head_b64}.{'' if detached else body_b64}.{b64url_encode(signature)}"
