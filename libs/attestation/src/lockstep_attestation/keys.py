"""Verification keys from PEM SubjectPublicKeyInfo and JSON Web Keys (RFC 7517/7518).

Only public material is ever built: private JWK members (``d``, ``p``, ``q``...) are ignored, so a
JWK that happens to carry its private half (veraison's ``ec-p256.jwk`` does) still yields just the
public key.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.asymmetric.types import PublicKeyTypes


class KeyLoadError(ValueError):
    """A key file or JWK cannot be turned into a public key; the message names which and why."""


_B64URL = re.compile(r"[A-Za-z0-9_-]*")

# RFC 7518 section 6.2.1.1: JWK "crv" names; section 6.2.1.2: coordinates are full-size.
_JWK_CURVES: Mapping[str, tuple[ec.EllipticCurve, int]] = {
    "P-256": (ec.SECP256R1(), 32),
    "P-384": (ec.SECP384R1(), 48),
    "P-521": (ec.SECP521R1(), 66),
}


def b64url_decode(segment: str, *, what: str) -> bytes:
    """Decode unpadded base64url (RFC 7515 section 2), refusing any non-canonical spelling.

    Python's decoder silently drops characters outside the alphabet and ignores non-zero padding
    bits; both would let two different strings carry the same bytes, so both are refused here.

    Args:
        segment: the text to decode.
        what: what the text is, for the error message.

    Raises:
        KeyLoadError: the text is not canonical unpadded base64url.
    """
    if not _B64URL.fullmatch(segment) or len(segment) % 4 == 1:
        raise KeyLoadError(f"{what} is not unpadded base64url")
    try:
        raw = base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))
    except (binascii.Error, ValueError) as exc:
        raise KeyLoadError(f"{what} is not base64url: {exc}") from None
    if b64url_encode(raw) != segment:
        raise KeyLoadError(f"{what} is not canonical base64url (non-zero padding bits)")
    return raw


def b64url_encode(raw: bytes) -> str:
    """Unpadded base64url (RFC 7515 section 2)."""
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def describe_key(key: object) -> str:
    """A short human name for a key's type and size, for error messages (``EC P-521``...)."""
    if isinstance(key, ec.EllipticCurvePublicKey | ec.EllipticCurvePrivateKey):
        names = {"secp256r1": "P-256", "secp384r1": "P-384", "secp521r1": "P-521"}
        return f"EC {names.get(key.curve.name, key.curve.name)}"
    if isinstance(key, rsa.RSAPublicKey | rsa.RSAPrivateKey):
        return f"RSA-{key.key_size}"
    if isinstance(key, ed25519.Ed25519PublicKey | ed25519.Ed25519PrivateKey):
        return "Ed25519"
    return type(key).__name__


def jwk_to_key(jwk: Mapping[str, Any]) -> PublicKeyTypes:
    """Build the public key a JWK describes (kty EC P-256/384/521, RSA, or OKP Ed25519).

    Args:
        jwk: the parsed JWK object.

    Raises:
        KeyLoadError: unsupported ``kty``/``crv`` or a malformed member.
    """
    kty = jwk.get("kty")
    if kty == "EC":
        return _ec_key(jwk)
    if kty == "RSA":
        n = int.from_bytes(_member(jwk, "n"), "big")
        e = int.from_bytes(_member(jwk, "e"), "big")
        try:
            return rsa.RSAPublicNumbers(e, n).public_key()
        except ValueError as exc:
            raise KeyLoadError(f"JWK RSA key is invalid: {exc}") from None
    if kty == "OKP" and jwk.get("crv") == "Ed25519":  # RFC 8037 section 2
        x = _member(jwk, "x")
        if len(x) != 32:
            raise KeyLoadError("JWK Ed25519 'x' must be 32 bytes")
        return ed25519.Ed25519PublicKey.from_public_bytes(x)
    raise KeyLoadError(f"JWK kty {kty!r} / crv {jwk.get('crv')!r} is not supported")


def _ec_key(jwk: Mapping[str, Any]) -> PublicKeyTypes:
    crv = jwk.get("crv")
    if not isinstance(crv, str) or crv not in _JWK_CURVES:
        raise KeyLoadError(f"JWK EC crv {crv!r} is not supported (P-256, P-384, P-521)")
    curve, size = _JWK_CURVES[crv]
    x, y = _member(jwk, "x"), _member(jwk, "y")
    if len(x) != size or len(y) != size:
        raise KeyLoadError(f"JWK {crv} coordinates must be {size} bytes each")
    numbers = ec.EllipticCurvePublicNumbers(
        int.from_bytes(x, "big"), int.from_bytes(y, "big"), curve
    )
    try:
        return numbers.public_key()
    except ValueError as exc:
        raise KeyLoadError(f"JWK {crv} point is not on the curve: {exc}") from None


def _member(jwk: Mapping[str, Any], name: str) -> bytes:
    value = jwk.get(name)
    if not isinstance(value, str) or not value:
        raise KeyLoadError(f"JWK member {name!r} is missing or not a string")
    return b64url_decode(value, what=f"JWK member {name!r}")


def parse_public_key(data: bytes) -> PublicKeyTypes:
    """The public key in a PEM ``PUBLIC KEY`` block or a JWK (JSON); reading the bytes is the
    caller's business (``adapters/key_files.py`` reads key files).

    Args:
        data: the key's bytes; their content decides the format (a JSON object is a JWK).

    Raises:
        KeyLoadError: no public key in ``data``.
    """
    try:
        if data.lstrip().startswith(b"{"):
            return jwk_to_key(json.loads(data))
        return serialization.load_pem_public_key(data)
    except (KeyLoadError, ValueError, TypeError, AttributeError) as exc:
        raise KeyLoadError(f"not a PEM public key or JWK: {exc}") from None
