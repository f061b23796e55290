"""Signed CoRIM RIMs: COSE_Sign1 around 501(corim-map), reference-value digests extracted."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from functools import cache
from typing import Any

import cbor2
import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from lockstep_attestation import corim, cose
from lockstep_attestation.key_files import load_public_key
from tests.reference import REFERENCE as SHARED_REFERENCE

pytestmark = pytest.mark.unit

REFERENCE = SHARED_REFERENCE / "corim"
FIRST_DIGEST = "87428fc522803d31065e7bce3cf03fe475096631e5e07bbd7a0fde60c4cf25c7"


def real() -> tuple[bytes, Any]:
    path, jwk = REFERENCE / "signed-good-corim.cbor", REFERENCE / "ec-p256.jwk"
    return path.read_bytes(), load_public_key(jwk)


@cache
def p384() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP384R1())


def comid(digests: list[Any]) -> cbor2.CBORTag:
    """506(<< comid >>) with one reference triple (triples key 0) holding ``digests``."""
    env = {0: {1: "ACME", 2: "Trap"}}
    body = {1: {0: "comid-1"}, 4: {0: [[env, [{0: "fw", 1: {2: digests}}]]]}}
    return cbor2.CBORTag(506, cbor2.dumps(body))


def signed(
    corim_map: dict[int, Any],
    *,
    content_type: str | None = corim.CONTENT_TYPE,
    meta: dict[int, Any] | None = None,
) -> bytes:
    extra: dict[int, Any] = {} if content_type is None else {3: content_type}
    if meta is not None:
        extra[8] = cbor2.dumps(meta)
    payload = cbor2.dumps(cbor2.CBORTag(501, corim_map))
    return cose.sign1(payload, p384(), alg=-35, kid=b"rim", extra_protected=extra)


def test_real_veraison_corim_verifies() -> None:
    data, key = real()
    rim = corim.verify_corim(data, key)
    assert (rim.id, rim.profile, rim.kid, rim.alg) == ("test corim id", None, b"1", -7)
    assert rim.signer == "ACME Ltd signing key"
    # named-information id 1 (sha-256) is normalised to COSE -16
    assert [alg for alg, _ in rim.digests] == [-16, -16, -16]
    assert rim.digests[0][1].hex() == FIRST_DIGEST
    assert rim.not_after == datetime(2025, 12, 31, tzinfo=UTC)


def test_real_corim_validity_window_when_asked() -> None:
    data, key = real()
    corim.verify_corim(data, key, at=datetime(2024, 1, 1, tzinfo=UTC))
    with pytest.raises(corim.CorimError, match="signature validity"):
        corim.verify_corim(data, key, at=datetime(2026, 1, 1, tzinfo=UTC))


@pytest.mark.parametrize("where", ["payload", "signature", "protected"])
def test_real_corim_one_changed_byte_fails(where: str) -> None:
    data, key = real()
    offset = {
        "payload": data.index(bytes.fromhex(FIRST_DIGEST)),
        "signature": len(data) - 5,
        "protected": data.index(b"rim+cbor"),
    }[where]
    changed = bytearray(data)
    changed[offset] ^= 0x01
    with pytest.raises(corim.CorimError):
        corim.verify_corim(bytes(changed), key)


def test_real_corim_wrong_key_fails() -> None:
    data, _ = real()
    other = ec.generate_private_key(ec.SECP256R1()).public_key()
    with pytest.raises(corim.CorimError, match="ES256 signature does not verify"):
        corim.verify_corim(data, other)


def test_own_corim_digest_normalisation() -> None:
    sha384, sha512, sha256 = b"\x03" * 48, b"\x05" * 64, b"\x02" * 32
    digests = [
        [-43, sha384],
        [8, sha512],
        ["sha-256", sha256],
        [9, b"\x00" * 28],
        ["sha3-256", b""],
    ]
    rid = uuid.UUID("31fb5abf-023e-4992-aa4e-95f9c1503bfa")
    profile = cbor2.CBORTag(111, bytes.fromhex("060A2B0601040182F4170101"))
    data = signed(
        {0: rid, 1: [comid(digests)], 3: profile},
        meta={0: {0: "signer"}, 1: {1: datetime(2030, 1, 1, tzinfo=UTC)}},
    )
    rim = corim.verify_corim(data, p384().public_key(), at=datetime(2029, 1, 1, tzinfo=UTC))
    assert rim.digests == ((-43, sha384), (-44, sha512), (-16, sha256))  # unknown algs dropped
    assert (rim.id, rim.profile, rim.signer) == (str(rid), "1.3.6.1.4.1.47639.1.1", "signer")


@pytest.mark.parametrize(
    ("corim_map", "kwargs", "message"),
    [
        ({0: "x", 1: [comid([[-43, b"\x00" * 47]])]}, {}, "not 48 bytes"),
        ({0: "x", 1: [comid([[-43]])]}, {}, "not an \\[alg, value\\] pair"),
        ({0: "x", 1: [comid([[9, b"\x00" * 28]])]}, {}, "no reference-value digest"),
        ({0: "x", 1: []}, {}, "no reference-value digest"),
        ({0: "x"}, {}, "'tags' \\(1\\) is missing"),
        ({0: "x", 1: [cbor2.CBORTag(506, {1: 2})]}, {}, "bstr-wrapped"),
        ({0: "x", 1: [comid([[-43, b"\x00" * 48]])], 3: "oid"}, {}, "neither 111"),
        ({0: "x", 1: [comid([[-43, b"\x00" * 48]])]}, {"content_type": None}, "content-type None"),
        (
            {0: "x", 1: [comid([[-43, b"\x00" * 48]])]},
            {"content_type": "application/cbor"},
            "content-type",
        ),
        ({0: "x", 1: [comid([[-43, b"\x00" * 48]])]}, {"meta": {0: {}, 1: {1: 5}}}, "tag-1 times"),
    ],
)
def test_own_corim_refusals(
    corim_map: dict[int, Any], kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(corim.CorimError, match=message):
        corim.verify_corim(signed(corim_map, **kwargs), p384().public_key())


def test_payload_must_be_tag_501() -> None:
    data = cose.sign1(
        cbor2.dumps({0: "x"}), p384(), alg=-35, kid=b"k", extra_protected={3: corim.CONTENT_TYPE}
    )
    with pytest.raises(corim.CorimError, match="tag 501"):
        corim.verify_corim(data, p384().public_key())


def test_cose_sign_is_not_a_signed_corim() -> None:
    data = cbor2.dumps(cbor2.CBORTag(98, [b"", {}, b"p", [[b"", {}, b"s"]]]))
    with pytest.raises(corim.CorimError, match="COSE_Sign1"):
        corim.verify_corim(data, p384().public_key())


@pytest.mark.parametrize(
    ("raw", "text"),
    [
        ("060A2B0601040182F4170101", "1.3.6.1.4.1.47639.1.1"),  # OCP bytes, DER prefix kept
        ("2B0601040182CC7F0101", "1.3.6.1.4.1.42623.1.1"),
        ("2A864886F70D", "1.2.840.113549"),
        ("8837", "2.999"),
    ],
)
def test_oid_text(raw: str, text: str) -> None:
    assert corim.oid_text(bytes.fromhex(raw)) == text


def test_oid_truncated() -> None:
    with pytest.raises(corim.CorimError, match="truncated"):
        corim.oid_text(bytes.fromhex("2B86"))
