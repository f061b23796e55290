"""Generated signing keys for tests, one per kind per process (RSA generation is slow)."""

from __future__ import annotations

from functools import cache

from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes

_CURVES: dict[str, ec.EllipticCurve] = {
    "P-256": ec.SECP256R1(),
    "P-384": ec.SECP384R1(),
    "P-521": ec.SECP521R1(),
}


@cache
def key_for(kind: str) -> PrivateKeyTypes:
    """A private key of ``kind``: ``P-256``/``P-384``/``P-521``, ``RSA-<bits>`` or ``Ed25519``."""
    if kind in _CURVES:
        return ec.generate_private_key(_CURVES[kind])
    if kind.startswith("RSA-"):
        return rsa.generate_private_key(public_exponent=65537, key_size=int(kind[4:]))
    if kind == "Ed25519":
        return ed25519.Ed25519PrivateKey.generate()
    raise ValueError(f"unknown key kind {kind!r}")
