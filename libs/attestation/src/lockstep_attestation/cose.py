"""COSE_Sign1 (tag 18) and COSE_Sign (tag 98) verification per RFC 9052, with cbor2 only.

The Sig_structure (RFC 9052 section 4.4) is built here from the *received* protected-header bytes;
they are never re-encoded. cbor2 6 hands back tuples for arrays and frozendict for maps inside
tags, so every shape check below accepts any Sequence / Mapping.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import cbor2
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes, PublicKeyTypes

from lockstep_attestation.jws import JwsError, create_signature, verify_signature
from lockstep_attestation.keys import describe_key


class CoseError(ValueError):
    """A COSE message is malformed or does not verify; the message names the header or signer."""


TAG_SIGN1, TAG_SIGN = 18, 98
HDR_ALG, HDR_CRIT, HDR_CONTENT_TYPE, HDR_KID = 1, 2, 3, 4  # RFC 9052 section 3.1

# RFC 9053 section 2.1 (ECDSA), section 2.2 (EdDSA); RFC 8230 section 2 (RSASSA-PSS).
ALGORITHMS: Mapping[int, str] = {
    -7: "ES256",
    -35: "ES384",
    -36: "ES512",
    -37: "PS256",
    -38: "PS384",
    -39: "PS512",
    -8: "EdDSA",
}
_CURVE_ALG = {"secp256r1": -7, "secp384r1": -35, "secp521r1": -36}

_DECODE_ERRORS = (
    cbor2.CBORError,
    ValueError,
    TypeError,
    LookupError,
    OverflowError,
    RecursionError,
)


def cbor_loads(data: bytes, *, what: str) -> Any:
    """Decode exactly one CBOR item: no trailing bytes, no duplicate map keys, no indefinite
    lengths (RFC 9052 section 3: duplicate labels make a message malformed).

    Raises:
        CoseError: naming ``what`` and the decoder's complaint.
    """
    stream = io.BytesIO(data)
    try:
        decoder = cbor2.CBORDecoder(
            stream, read_size=1, allow_duplicate_keys=False, allow_indefinite=False
        )
        item = decoder.decode()
    except _DECODE_ERRORS as exc:
        raise CoseError(f"{what} is not valid CBOR: {exc}") from None
    if stream.tell() != len(data):
        raise CoseError(f"{what} has {len(data) - stream.tell()} trailing byte(s) after the CBOR")
    return item


@dataclass(frozen=True, slots=True)
class CoseSigner:
    """One signature: the COSE_Sign1 itself, or one COSE_Signature of a COSE_Sign."""

    protected_raw: bytes
    protected: dict[Any, Any]
    unprotected: dict[Any, Any]
    signature: bytes

    @property
    def kid(self) -> bytes | None:
        """Label 4 from either bucket (decode checks it is a bstr)."""
        kid = self.protected.get(HDR_KID, self.unprotected.get(HDR_KID))
        return kid if isinstance(kid, bytes) else None

    @property
    def alg(self) -> int | None:
        """Label 1 from either bucket (decode checks it is an int)."""
        alg = self.protected.get(HDR_ALG, self.unprotected.get(HDR_ALG))
        return alg if type(alg) is int else None


@dataclass(frozen=True, slots=True)
class Cose:
    """A decoded COSE_Sign1 or COSE_Sign. For ``sign``, ``kid``/``alg`` are the first signer's
    (the body headers carry neither in practice); ``signers`` holds every signature."""

    kind: Literal["sign1", "sign"]
    payload: bytes
    protected: dict[Any, Any]
    unprotected: dict[Any, Any]
    kid: bytes | None
    alg: int | None
    protected_raw: bytes = b""
    signers: tuple[CoseSigner, ...] = field(default=())


def decode(data: bytes) -> Cose:
    """Decode a tagged COSE_Sign1 (18) or COSE_Sign (98); nothing is verified yet.

    Raises:
        CoseError: wrong tag, wrong shape, bad header types, detached payload.
    """
    item = cbor_loads(data, what="COSE message")
    if not isinstance(item, cbor2.CBORTag) or item.tag not in (TAG_SIGN1, TAG_SIGN):
        raise CoseError("not a tagged COSE_Sign1 (tag 18) or COSE_Sign (tag 98)")
    kind: Literal["sign1", "sign"] = "sign1" if item.tag == TAG_SIGN1 else "sign"
    body = _array(item.value, 4, f"COSE_{'Sign1' if kind == 'sign1' else 'Sign'}")
    raw, protected, unprotected = _headers(body[0], body[1], "message")
    payload = body[2]
    if not isinstance(payload, bytes):  # RFC 9052 section 2: nil = detached, unsupported here
        raise CoseError("COSE payload is detached or not a bstr")
    signers: tuple[CoseSigner, ...]
    if kind == "sign1":
        signers = (CoseSigner(raw, protected, unprotected, _bstr(body[3], "signature")),)
    else:
        sigs = body[3]
        if not isinstance(sigs, Sequence) or isinstance(sigs, bytes | str) or not sigs:
            raise CoseError("COSE_Sign signatures must be a non-empty array")
        signers = tuple(_signer(s, i) for i, s in enumerate(sigs))
    first = signers[0]
    return Cose(kind, payload, protected, unprotected, first.kid, first.alg, raw, signers)


def _signer(item: Any, index: int) -> CoseSigner:
    where = f"signer {index}"
    sig = _array(item, 3, f"COSE_Signature {index}")
    raw, protected, unprotected = _headers(sig[0], sig[1], where)
    return CoseSigner(raw, protected, unprotected, _bstr(sig[2], f"{where} signature"))


def _array(item: Any, length: int, what: str) -> Sequence[Any]:
    if not isinstance(item, Sequence) or isinstance(item, bytes | str) or len(item) != length:
        raise CoseError(f"{what} must be an array of {length} items")
    return item


def _bstr(item: Any, what: str) -> bytes:
    if not isinstance(item, bytes):
        raise CoseError(f"COSE {what} must be a bstr")
    return item


def _headers(
    raw: Any, unprotected: Any, where: str
) -> tuple[bytes, dict[Any, Any], dict[Any, Any]]:
    raw = _bstr(raw, f"{where} protected header")
    # RFC 9052 section 3: protected is a bstr, zero-length when empty, else a serialized map.
    protected = cbor_loads(raw, what=f"{where} protected header") if raw else {}
    if not isinstance(protected, Mapping) or not isinstance(unprotected, Mapping):
        raise CoseError(f"{where} headers must be maps")
    prot, unprot = dict(protected), dict(unprotected)
    for label in (*prot, *unprot):  # RFC 9052 section 3: label = int / tstr. cbor2's simple
        if type(label) not in (int, str):  # values compare equal to ints: refuse them too
            raise CoseError(f"{where} header label {label!r} is neither an int nor a tstr")
    both = prot.keys() & unprot.keys()
    if both:  # RFC 9052 section 3: a label MUST NOT occur in both buckets
        raise CoseError(f"{where} header label(s) {sorted(both, key=repr)} in both buckets")
    merged = {**prot, **unprot}
    if HDR_CRIT in merged:  # RFC 9052 section 3.1: we process no crit extension, so refuse
        raise CoseError(f"{where} header 'crit' is not supported")
    if HDR_ALG in merged and type(merged[HDR_ALG]) is not int:  # bool is not an alg id
        raise CoseError(f"{where} alg {merged[HDR_ALG]!r} is not a registered integer id")
    if HDR_KID in merged and not isinstance(merged[HDR_KID], bytes):
        raise CoseError(f"{where} kid must be a bstr")
    return raw, prot, unprot


def sig_structure(msg: Cose, signer: CoseSigner) -> bytes:
    """The ToBeSigned bytes (RFC 9052 section 4.4), external_aad empty."""
    if msg.kind == "sign1":
        return cbor2.dumps(["Signature1", signer.protected_raw, b"", msg.payload])
    return cbor2.dumps(["Signature", msg.protected_raw, signer.protected_raw, b"", msg.payload])


def infer_alg(key: object) -> int | None:
    """The algorithm a key implies when a COSE_Sign signer names none (the Tetrel-signed OCP
    S.A.F.E. CoRIM reports): P-256/384/521 -> ES256/384/512, Ed25519 -> EdDSA; RSA -> None
    (PS256/384/512 cannot be told apart)."""
    if isinstance(key, ec.EllipticCurvePublicKey):
        return _CURVE_ALG.get(key.curve.name)
    if isinstance(key, ed25519.Ed25519PublicKey):
        return -8
    return None


def verify(
    msg: Cose,
    key: PublicKeyTypes,
    *,
    kid: bytes | None = None,
    allowed: frozenset[int] | None = None,
    min_rsa_bits: int = 2048,
) -> None:
    """Verify ``msg`` with ``key``: the Sign1 signature, or for COSE_Sign any signer (only those
    whose kid equals ``kid`` when it is given) that verifies.

    Args:
        msg: from :func:`decode`.
        key: the public key.
        kid: restrict COSE_Sign signers (and check the Sign1 kid) to this key id.
        allowed: algorithm ids accepted; None means every id in :data:`ALGORITHMS`.
        min_rsa_bits: floor for PS* keys.

    Raises:
        CoseError: naming the signer, kid and alg that failed.
    """
    signers = [s for s in msg.signers if kid is None or s.kid == kid]
    if not signers:
        raise CoseError(f"no COSE signer has kid {kid!r}")
    errors = []
    for index, signer in enumerate(signers):
        try:
            _verify_one(msg, signer, key, allowed, min_rsa_bits)
        except CoseError as exc:
            errors.append(f"signer {index} (kid {signer.kid!r}): {exc}")
            continue
        return
    raise CoseError("; ".join(errors))


def _verify_one(
    msg: Cose, signer: CoseSigner, key: PublicKeyTypes, allowed: frozenset[int] | None, bits: int
) -> None:
    alg = signer.alg
    if alg is None:
        if msg.kind == "sign1":  # only the documented COSE_Sign quirk gets an inferred alg
            raise CoseError("COSE_Sign1 has no alg header")
        alg = infer_alg(key)
        if alg is None:
            raise CoseError(f"no alg header and none can be inferred from {describe_key(key)}")
    if alg not in ALGORITHMS or (allowed is not None and alg not in allowed):
        raise CoseError(f"alg {alg} is not allowed")
    try:
        verify_signature(ALGORITHMS[alg], key, sig_structure(msg, signer), signer.signature,
                         min_rsa_bits=bits)  # fmt: skip
    except JwsError as exc:
        raise CoseError(str(exc)) from None


def sign1(
    payload: bytes,
    key: PrivateKeyTypes,
    *,
    alg: int,
    kid: bytes,
    extra_protected: Mapping[int, Any] | None = None,
) -> bytes:
    """Build a tagged COSE_Sign1 with alg and kid in the protected header (for fixtures/tests).

    Raises:
        CoseError: unsupported alg or a key that does not fit it.
    """
    if alg not in ALGORITHMS:
        raise CoseError(f"alg {alg} is not supported")
    protected = cbor2.dumps({HDR_ALG: alg, HDR_KID: kid, **dict(extra_protected or {})})
    tbs = cbor2.dumps(["Signature1", protected, b"", payload])
    try:
        signature = create_signature(ALGORITHMS[alg], key, tbs)
    except JwsError as exc:
        raise CoseError(str(exc)) from None
    return cbor2.dumps(cbor2.CBORTag(TAG_SIGN1, [protected, {}, payload, signature]))
