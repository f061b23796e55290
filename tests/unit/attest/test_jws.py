"""Compact JWS (RFC 7515) sign/verify with the RFC 7518 algorithms, and the refusals."""

from __future__ import annotations

import base64
import json

import pytest

from lockstep_attest.testing.keys import key_for
from lockstep_attestation import jws
from lockstep_attestation.key_files import load_public_key
from tests.reference import REFERENCE

pytestmark = pytest.mark.unit

ALL = frozenset(jws.ALGORITHMS)


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def token_with_header(header: dict[str, object], payload: bytes = b"x", sig: bytes = b"s") -> str:
    return f"{b64(json.dumps(header).encode())}.{b64(payload)}.{b64(sig)}"


PAIRS = [
    ("ES256", "P-256"),
    ("ES384", "P-384"),
    ("ES512", "P-521"),
    ("PS256", "RSA-3072"),
    ("PS384", "RSA-3072"),
    ("PS512", "RSA-3072"),
    ("EdDSA", "Ed25519"),
]


@pytest.mark.parametrize(("alg", "kind"), PAIRS)
def test_round_trip(alg: str, kind: str) -> None:
    key = key_for(kind)
    token = jws.sign_compact(b'{"hello":1}', key, alg=alg, kid="k1")
    parsed = jws.parse_compact(token)
    assert (parsed.alg, parsed.kid, parsed.payload) == (alg, "k1", b'{"hello":1}')
    jws.verify(parsed, key.public_key(), allowed=ALL)


@pytest.mark.parametrize(("alg", "kind"), PAIRS[:3])
def test_ecdsa_signature_is_raw_r_s(alg: str, kind: str) -> None:
    """RFC 7518 section 3.4: 2 x coordinate size, not DER."""
    token = jws.sign_compact(b"p", key_for(kind), alg=alg, kid="k")
    assert len(jws.parse_compact(token).signature) == {"ES256": 64, "ES384": 96, "ES512": 132}[alg]


def test_detached_payload_appendix_f() -> None:
    key = key_for("P-384")
    token = jws.sign_compact(b"manifest", key, alg="ES384", kid="m", detached=True)
    assert token.split(".")[1] == ""
    jws.verify(
        jws.parse_compact(token, detached_payload=b"manifest"), key.public_key(), allowed=ALL
    )
    with pytest.raises(jws.JwsError, match="signature does not verify"):
        jws.verify(
            jws.parse_compact(token, detached_payload=b"manifesT"), key.public_key(), allowed=ALL
        )
    with pytest.raises(jws.JwsError, match="does not verify"):  # empty payload is not the manifest
        jws.verify(jws.parse_compact(token), key.public_key(), allowed=ALL)


def test_detached_payload_with_attached_segment_refused() -> None:
    token = jws.sign_compact(b"a", key_for("P-384"), alg="ES384", kid="m")
    with pytest.raises(jws.JwsError, match="empty payload segment"):
        jws.parse_compact(token, detached_payload=b"a")


@pytest.mark.parametrize(
    ("alg", "signer", "verifier", "message"),
    [
        ("ES384", "P-384", "P-521", "ES384 needs an EC P-384 key, got EC P-521"),
        ("ES512", "P-521", "P-384", "ES512 needs an EC P-521 key"),
        ("ES256", "P-256", "RSA-3072", "ES256 needs an EC P-256 key, got RSA-3072"),
        ("PS384", "RSA-3072", "P-384", "PS384 needs an RSA key"),
        ("EdDSA", "Ed25519", "P-256", "EdDSA needs an Ed25519 key"),
    ],
)
def test_alg_key_mismatch_refused(alg: str, signer: str, verifier: str, message: str) -> None:
    token = jws.parse_compact(jws.sign_compact(b"p", key_for(signer), alg=alg, kid="k"))
    with pytest.raises(jws.JwsError, match=message):
        jws.verify(token, key_for(verifier).public_key(), allowed=ALL)


def test_rsa_floor() -> None:
    token = jws.parse_compact(jws.sign_compact(b"p", key_for("RSA-2048"), alg="PS384", kid="k"))
    public = key_for("RSA-2048").public_key()
    jws.verify(token, public, allowed=ALL)  # RFC 7518 floor is 2048
    with pytest.raises(jws.JwsError, match="at least 3072 bits, got RSA-2048"):
        jws.verify(token, public, allowed=ALL, min_rsa_bits=3072)


def test_alg_outside_allowed_refused() -> None:
    token = jws.parse_compact(jws.sign_compact(b"p", key_for("P-256"), alg="ES256", kid="k9"))
    with pytest.raises(jws.JwsError, match=r"alg 'ES256' is not allowed \(kid 'k9'"):
        jws.verify(token, key_for("P-256").public_key(), allowed=frozenset({"ES384"}))


@pytest.mark.parametrize("alg", ["none", "None", "NONE"])
def test_alg_none_always_refused(alg: str) -> None:
    token = jws.parse_compact(token_with_header({"alg": alg, "kid": "k"}, sig=b""))
    with pytest.raises(jws.JwsError, match="'none' is refused"):
        jws.verify(token, key_for("P-256").public_key(), allowed=ALL | {"none", alg})


@pytest.mark.parametrize("alg", ["HS256", "RS256", "ES256K"])
def test_unsupported_alg_refused(alg: str) -> None:
    token = jws.parse_compact(token_with_header({"alg": alg}))
    with pytest.raises(jws.JwsError, match="not allowed"):
        jws.verify(token, key_for("P-256").public_key(), allowed=ALL | {alg})


@pytest.mark.parametrize("segment", [0, 1, 2])
def test_any_changed_segment_fails(segment: int) -> None:
    key = key_for("P-521")
    parts = jws.sign_compact(b'{"a":"payload"}', key, alg="ES512", kid="k").split(".")
    middle = len(parts[segment]) // 2
    char = parts[segment][middle]
    parts[segment] = (
        parts[segment][:middle] + ("B" if char == "A" else "A") + parts[segment][middle + 1 :]
    )
    with pytest.raises(jws.JwsError):
        jws.verify(jws.parse_compact(".".join(parts)), key.public_key(), allowed=ALL)


@pytest.mark.parametrize(
    ("token", "message"),
    [
        ("a.b", "3 segments"),
        ("a.b.c.d", "3 segments"),
        ("eyJhbGciOiJFUzI1NiJ9.a+b.c", "payload segment is not unpadded base64url"),
        ("eyJhbGciOiJFUzI1NiJ9.YQ==.c", "payload segment is not unpadded base64url"),
        ("eyJhbGciOiJFUzI1NiJ9.YR.c", "not canonical"),  # 'YR' carries non-zero spare bits
        (b64(b"not json") + ".YQ.c", "header is not JSON"),
        (b64(b"[1]") + ".YQ.c", "header is not a JSON object"),
        (b64(b"{}") + ".YQ.c", "no string 'alg'"),
        (b64(b'{"alg":1}') + ".YQ.c", "no string 'alg'"),
        (b64(b'{"alg":"ES256","kid":7}') + ".YQ.c", "'kid' is not a string"),
        (b64(b'{"alg":"ES256","crit":["b64"]}') + ".YQ.c", "'crit'"),
        (b64(b'{"alg":"ES256","alg":"none"}') + ".YQ.c", "duplicate member 'alg'"),
    ],
)
def test_malformed_tokens(token: str, message: str) -> None:
    with pytest.raises(jws.JwsError, match=message):
        jws.parse_compact(token)


def test_non_ascii_token_refused() -> None:
    with pytest.raises(jws.JwsError, match="not ASCII"):
        jws.parse_compact("é.a.b".encode())


def test_surrounding_whitespace_ignored_and_bytes_accepted() -> None:
    key = key_for("P-384")
    token = jws.sign_compact(b"p", key, alg="ES384", kid="k")
    jws.verify(jws.parse_compact(f"\n{token}\r\n".encode()), key.public_key(), allowed=ALL)


def test_wrong_signature_length_refused() -> None:
    key = key_for("P-256")
    head, body, _ = jws.sign_compact(b"p", key, alg="ES256", kid="k").split(".")
    token = jws.parse_compact(f"{head}.{body}.{b64(bytes(63))}")
    with pytest.raises(jws.JwsError, match="must be 64 bytes, got 63"):
        jws.verify(token, key.public_key(), allowed=ALL)


def test_sign_refusals() -> None:
    with pytest.raises(jws.JwsError, match="not supported for signing"):
        jws.sign_compact(b"p", key_for("P-256"), alg="none", kid="k")
    with pytest.raises(jws.JwsError, match="ES384 needs an EC P-384 key"):
        jws.sign_compact(b"p", key_for("P-521"), alg="ES384", kid="k")
    with pytest.raises(jws.JwsError, match="may not set"):
        jws.sign_compact(b"p", key_for("P-256"), alg="ES256", kid="k", extra_header={"alg": "x"})


def test_extra_header_and_missing_kid() -> None:
    token = jws.sign_compact(
        b"p", key_for("P-256"), alg="ES256", kid="k", extra_header={"typ": "JWT"}
    )
    assert jws.parse_compact(token).header == {"alg": "ES256", "kid": "k", "typ": "JWT"}
    assert jws.parse_compact(token_with_header({"alg": "ES256"})).kid is None


def test_real_helloworld_verifies_interop() -> None:
    """The OCP sample was produced by PyJWT; our r||s and base64url handling must agree."""
    sample = REFERENCE / "ocp-safe" / "samples"
    token = jws.parse_compact((sample / "helloworld.jws").read_bytes())
    key = load_public_key(sample / "testkey_ecdsa_p521.pub")
    jws.verify(token, key, allowed=frozenset({"ES512"}))
    assert token.kid == "some_key_id"
