"""COSE_Sign1 / COSE_Sign (RFC 9052) verification with our own Sig_structure."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import cbor2
import pytest
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes

from lockstep_attest.testing.keys import key_for
from lockstep_attestation import cose
from lockstep_attestation.jws import create_signature
from lockstep_attestation.key_files import load_public_key
from tests.reference import REFERENCE

pytestmark = pytest.mark.unit

TETREL_DIR = (
    REFERENCE / "ocp-safe" / "reports" / "Microsoft" / "2026" / "microsoft_hsm_cryptographic_module"
)
TETREL_KEY = (
    REFERENCE / "ocp-safe" / "srp-keys" / "Tetrel_Security" / "tetrel-ocp-sfr-signing-key.pub"
)
NCC_KEY = REFERENCE / "ocp-safe" / "srp-keys" / "NCC_Group" / "ocp_safe_ncc_group_ecdsa_p521.pub"


def cose_sign(
    payload: bytes, signers: Sequence[tuple[PrivateKeyTypes, str, dict[int, Any], dict[int, Any]]]
) -> bytes:
    """A tagged COSE_Sign with an empty body header; each signer is (key, JOSE alg,
    protected, unprotected), signed over Sig_structure "Signature" (RFC 9052 section 4.4)."""
    sigs = []
    for key, alg, protected, unprotected in signers:
        raw = cbor2.dumps(protected) if protected else b""
        tbs = cbor2.dumps(["Signature", b"", raw, b"", payload])
        sigs.append([raw, unprotected, create_signature(alg, key, tbs)])
    return cbor2.dumps(cbor2.CBORTag(98, [b"", {}, payload, sigs]))


def real_tetrel_reports() -> list[Path]:
    return sorted(TETREL_DIR.glob("*/*_signed.cbor"))


PAIRS = [
    (-7, "P-256"),
    (-35, "P-384"),
    (-36, "P-521"),
    (-37, "RSA-3072"),
    (-38, "RSA-3072"),
    (-39, "RSA-3072"),
    (-8, "Ed25519"),
]


@pytest.mark.parametrize(("alg", "kind"), PAIRS)
def test_sign1_round_trip(alg: int, kind: str) -> None:
    key = key_for(kind)
    data = cose.sign1(b"payload", key, alg=alg, kid=b"k1")
    msg = cose.decode(data)
    assert (msg.kind, msg.payload, msg.kid, msg.alg) == ("sign1", b"payload", b"k1", alg)
    cose.verify(msg, key.public_key())


def test_sign1_tampered_payload_fails() -> None:
    key = key_for("P-384")
    data = bytearray(cose.sign1(b"payload", key, alg=-35, kid=b"k"))
    data[data.index(b"payload")] ^= 0x01
    with pytest.raises(cose.CoseError, match="ES384 signature does not verify"):
        cose.verify(cose.decode(bytes(data)), key.public_key())


def test_alg_key_mismatch_refused() -> None:
    msg = cose.decode(cose.sign1(b"p", key_for("P-384"), alg=-35, kid=b"k"))
    with pytest.raises(cose.CoseError, match="ES384 needs an EC P-384 key, got EC P-521"):
        cose.verify(msg, key_for("P-521").public_key())


def test_allowed_restricts_algorithms() -> None:
    msg = cose.decode(cose.sign1(b"p", key_for("P-256"), alg=-7, kid=b"k"))
    with pytest.raises(cose.CoseError, match="alg -7 is not allowed"):
        cose.verify(msg, key_for("P-256").public_key(), allowed=frozenset({-35, -36}))


def test_sign1_without_alg_is_not_inferred() -> None:
    key = key_for("P-521")
    tbs = cbor2.dumps(["Signature1", b"", b"", b"p"])
    data = cbor2.dumps(
        cbor2.CBORTag(18, [b"", {4: b"k"}, b"p", create_signature("ES512", key, tbs)])
    )
    with pytest.raises(cose.CoseError, match="COSE_Sign1 has no alg"):
        cose.verify(cose.decode(data), key.public_key())


@pytest.mark.parametrize(
    ("kind", "alg"), [("P-256", "ES256"), ("P-384", "ES384"), ("P-521", "ES512")]
)
def test_cose_sign_without_alg_infers_from_curve(kind: str, alg: str) -> None:
    key = key_for(kind)
    msg = cose.decode(cose_sign(b"p", [(key, alg, {}, {4: b"k"})]))
    assert (msg.kind, msg.alg, msg.kid) == ("sign", None, b"k")
    cose.verify(msg, key.public_key())


def test_cose_sign_without_alg_and_rsa_key_refused() -> None:
    key = key_for("RSA-3072")
    msg = cose.decode(cose_sign(b"p", [(key, "PS384", {}, {})]))
    with pytest.raises(cose.CoseError, match="none can be inferred from RSA-3072"):
        cose.verify(msg, key.public_key())


def test_cose_sign_kid_selects_signer() -> None:
    a, b = key_for("P-384"), key_for("P-521")
    msg = cose.decode(
        cose_sign(b"p", [(a, "ES384", {1: -35}, {4: b"a"}), (b, "ES512", {1: -36}, {4: b"b"})])
    )
    cose.verify(msg, b.public_key())  # any signer
    cose.verify(msg, b.public_key(), kid=b"b")
    with pytest.raises(cose.CoseError, match="ES384 needs an EC P-384 key"):
        cose.verify(msg, b.public_key(), kid=b"a")
    with pytest.raises(cose.CoseError, match="no COSE signer has kid b'c'"):
        cose.verify(msg, b.public_key(), kid=b"c")


def test_real_tetrel_cose_sign_verifies() -> None:
    """The real OCP S.A.F.E. CoRIM reports: tag 98, empty protected headers, no alg."""
    tetrel, ncc = load_public_key(TETREL_KEY), load_public_key(NCC_KEY)
    for path in real_tetrel_reports():
        data = path.read_bytes()
        msg = cose.decode(data)
        assert (msg.kind, msg.alg, msg.kid) == ("sign", None, b"tetrel-ocp-sfr-signing-key")
        assert msg.protected == {} and msg.signers[0].protected_raw == b""
        cose.verify(msg, tetrel, allowed=frozenset({-36}))
        with pytest.raises(cose.CoseError, match="does not verify"):
            cose.verify(msg, ncc)
        flipped = bytearray(data)
        flipped[len(data) // 2] ^= 0x01  # inside the payload bstr
        with pytest.raises(cose.CoseError):
            cose.verify(cose.decode(bytes(flipped)), tetrel)


def _protected(mapping_bytes: bytes) -> bytes:
    return cbor2.dumps(cbor2.CBORTag(18, [mapping_bytes, {}, b"p", b"sig"]))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (cbor2.dumps([b"", {}, b"p", b"s"]), "not a tagged COSE_Sign1"),
        (cbor2.dumps(cbor2.CBORTag(17, [b"", {}, b"p", b"s"])), "not a tagged COSE_Sign1"),
        (cbor2.dumps(cbor2.CBORTag(18, [b"", {}, b"p"])), "array of 4"),
        (cbor2.dumps(cbor2.CBORTag(18, [b"", {}, b"p", b"s"])) + b"\x00", "1 trailing byte"),
        (cbor2.dumps(cbor2.CBORTag(18, [b"", {}, None, b"s"])), "detached"),
        (cbor2.dumps(cbor2.CBORTag(18, ["", {}, b"p", b"s"])), "protected header must be a bstr"),
        (cbor2.dumps(cbor2.CBORTag(18, [b"", {}, b"p", "s"])), "signature must be a bstr"),
        (_protected(bytes.fromhex("a2012601 27")), "not valid CBOR"),
        (_protected(bytes.fromhex("a2 0126 0127")), "Duplicate map key"),
        (_protected(bytes.fromhex("a1 0126") + b"\x00"), "trailing"),
        (_protected(cbor2.dumps({1: "ES256"})), "not a registered integer"),
        (_protected(cbor2.dumps({1: True})), "not a registered integer"),
        (_protected(cbor2.dumps({4: "kid"})), "kid must be a bstr"),
        (_protected(cbor2.dumps({2: [4]})), "'crit' is not supported"),
        (_protected(cbor2.dumps({cbor2.CBORSimpleValue(4): b"k"})), "neither an int nor a tstr"),
        (
            cbor2.dumps(cbor2.CBORTag(18, [cbor2.dumps({1: -7}), {1: -7}, b"p", b"s"])),
            "both buckets",
        ),
        (cbor2.dumps(cbor2.CBORTag(98, [b"", {}, b"p", []])), "non-empty array"),
        (cbor2.dumps(cbor2.CBORTag(98, [b"", {}, b"p", [[b"", {}]]])), "array of 3"),
        (bytes.fromhex("d2 9f 40 a0 41 70 41 73 ff"), "not valid CBOR"),  # indefinite array
        (b"\xff\xfe", "not valid CBOR"),
    ],
)
def test_malformed_messages(data: bytes, message: str) -> None:
    with pytest.raises(cose.CoseError, match=message):
        cose.decode(data)


def test_cbor2_tuples_and_frozendicts_are_accepted() -> None:
    """cbor2 6 decodes arrays inside tags as tuples and maps as frozendict; both work."""
    key = key_for("P-256")
    msg = cose.decode(cose.sign1(b"p", key, alg=-7, kid=b"k"))
    assert isinstance(msg.protected, dict) and isinstance(msg.unprotected, dict)
    cose.verify(msg, key.public_key())


def test_sign1_refuses_unknown_alg_and_mismatched_key() -> None:
    with pytest.raises(cose.CoseError, match="alg -257 is not supported"):
        cose.sign1(b"p", key_for("RSA-3072"), alg=-257, kid=b"k")
    with pytest.raises(cose.CoseError, match="ES512 needs an EC P-521 key"):
        cose.sign1(b"p", key_for("P-256"), alg=-36, kid=b"k")


def test_sig_structure_matches_rfc_9052_layout() -> None:
    msg = cose.decode(cose.sign1(b"pay", key_for("P-256"), alg=-7, kid=b"k"))
    expected = cbor2.dumps(["Signature1", msg.protected_raw, b"", b"pay"])
    assert cose.sig_structure(msg, msg.signers[0]) == expected
