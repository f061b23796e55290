"""OCP S.A.F.E. short-form reports: every real report verifies, any change is refused, the
real-data quirks are tolerated without ever accepting a wrong image hash."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

import cbor2
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
from hypothesis import given, settings
from hypothesis import strategies as st

from lockstep_attest.testing.keys import key_for
from lockstep_attestation import cose, jws, safe
from lockstep_attestation.key_files import load_srp_keys
from lockstep_attestation.safe import SfrError, SfrIssue, SfrReport, SrpKeySet
from tests.reference import REFERENCE

pytestmark = pytest.mark.unit

OCP = REFERENCE / "ocp-safe"
REPORTS = OCP / "reports"
SIGNED = sorted(
    p for p in REPORTS.rglob("*") if p.suffix in (".jws", ".jwt") or p.name.endswith("_signed.cbor")
)
JWS_REPORTS = [p for p in SIGNED if p.suffix in (".jws", ".jwt")]
TWINS = sorted(REPORTS.rglob("*.json"))
H384, H512 = "ab" * 48, "cd" * 64


def ids(paths: list[Path]) -> list[str]:
    return [p.name[-60:] for p in paths]


@cache
def srp_keys() -> SrpKeySet:
    return load_srp_keys(OCP / "srp-keys")


def keyset(**named: str) -> SrpKeySet:
    """``kid=kind``: each kid maps to its own generated key file name ``<kid>/<kind>.pem``."""
    keys = {f"{kid}/{kind}.pem": key_for(kind).public_key() for kid, kind in named.items()}
    return SrpKeySet(keys, {kid: f"{kid}/{kind}.pem" for kid, kind in named.items()})


def payload(
    device: dict[str, Any] | None = None, audit: dict[str, Any] | None = None, **top: Any
) -> bytes:
    doc = {
        "review_framework_version": "1.1",
        "device": {
            "vendor": "ACME",
            "product": "Trap",
            "fw_version": "1.2.3",
            "fw_hash_sha2_384": H384,
            "fw_hash_sha2_512": H512,
            **(device or {}),
        },
        "audit": {
            "srp": "Pentest Corp",
            "completion_date": "2025-01-02",
            "scope_number": 1,
            "issues": [],
            **(audit or {}),
        },
        **top,
    }
    return json.dumps({k: v for k, v in doc.items() if v is not None}).encode()


def signed_json(
    body: bytes = b"", *, alg: str = "ES512", kind: str = "P-521", kid: str = "srp", **header: Any
) -> bytes:
    return jws.sign_compact(
        body or payload(), key_for(kind), alg=alg, kid=kid, extra_header=header
    ).encode()


# --- the real reports --------------------------------------------------------------------------


@pytest.mark.parametrize("path", SIGNED, ids=ids(SIGNED))
def test_every_real_report_verifies(path: Path) -> None:
    report = safe.verify_sfr(path.read_bytes(), srp_keys())
    assert report.kid is not None and report.kid in safe.KNOWN_SRP_KIDS
    assert report.key_name == safe.KNOWN_SRP_KIDS[report.kid]
    assert report.form == ("corim" if path.suffix == ".cbor" else "jws")
    assert report.vendor and report.product and report.srp


@pytest.mark.parametrize("segment", ["header", "payload", "signature"])
@pytest.mark.parametrize("path", JWS_REPORTS, ids=ids(JWS_REPORTS))
def test_real_jws_one_changed_byte_fails(path: Path, segment: str) -> None:
    data = bytearray(path.read_bytes())
    dots = [i for i, c in enumerate(data) if c == ord(".")]
    start, end = {
        "header": (0, dots[0]),
        "payload": (dots[0] + 1, dots[1]),
        "signature": (dots[1] + 1, len(data.rstrip())),
    }[segment]
    middle = (start + end) // 2
    data[middle] = ord("B") if data[middle] == ord("A") else ord("A")  # still valid base64url
    with pytest.raises(SfrError):
        safe.verify_sfr(bytes(data), srp_keys())


@pytest.mark.parametrize("path", [p for p in SIGNED if p.suffix == ".cbor"])
def test_real_cbor_changed_payload_byte_fails(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[data.index(b"sfr-corim-")] ^= 0x01
    with pytest.raises(SfrError, match="does not verify"):
        safe.verify_sfr(bytes(data), srp_keys())


def test_json_twins_are_not_reports() -> None:
    for twin in TWINS:
        with pytest.raises(SfrError, match="unsigned JSON"):
            safe.verify_sfr(twin.read_bytes(), srp_keys())


def test_real_quirks_read_as_documented() -> None:
    reports = {p.name: safe.verify_sfr(p.read_bytes(), srp_keys()) for p in SIGNED}
    amd = [r for n, r in reports.items() if "amd_mi300x" in n]
    assert amd and all(r.fw_sha384 is None and r.fw_sha512 is None for r in amd)  # 64-hex in 512
    hopper = next(r for n, r in reports.items() if "Hopper" in n)
    assert (hopper.fw_version, hopper.fw_sha512, hopper.scope_number) == ("580.65.06", None, "1")
    assert hopper.fw_sha384 is not None and safe.image_matches(hopper, sha384=hopper.fw_sha384)
    tetrel = [r for r in reports.values() if r.form == "corim"]
    assert len(tetrel) == 3 and all(r.srp == "Tetrel Security Inc." for r in tetrel)


def test_helloworld_sample_verifies_with_its_test_key() -> None:
    samples = OCP / "samples"
    data = (samples / "helloworld.jws").read_bytes()
    report = safe.verify_sfr(data, load_srp_keys(samples))  # unknown kid: fallback by curve
    assert (report.kid, report.key_name) == ("some_key_id", "testkey_ecdsa_p521.pub")
    assert report.fw_sha384 is not None
    assert report.fw_sha384.startswith("cb258fc154582e02")  # the sample's "0x" prefix is dropped
    with pytest.raises(SfrError, match="verifies with no SRP key"):
        safe.verify_sfr(data, srp_keys())
    with pytest.raises(SfrError, match="unsigned JSON"):
        safe.verify_sfr((samples / "helloworld.json").read_bytes(), load_srp_keys(samples))


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_flipping_any_byte_never_yields_a_report(data: st.DataObject) -> None:
    path = data.draw(st.sampled_from(SIGNED))
    original = path.read_bytes()
    position = data.draw(st.integers(0, len(original) - 1))
    changed = bytearray(original)
    changed[position] ^= data.draw(st.integers(1, 255))
    with pytest.raises(SfrError):
        safe.verify_sfr(bytes(changed), srp_keys())


# --- own fixtures: algorithms and keys ---------------------------------------------------------


@pytest.mark.parametrize(
    ("alg", "kind"),
    [("ES384", "P-384"), ("ES512", "P-521"), ("PS384", "RSA-3072"), ("PS512", "RSA-3072")],
)
def test_allowed_algorithms_round_trip(alg: str, kind: str) -> None:
    report = safe.verify_sfr(signed_json(alg=alg, kind=kind), keyset(srp=kind))
    assert (report.kid, report.key_name, report.fw_sha384) == ("srp", f"srp/{kind}.pem", H384)


@pytest.mark.parametrize(
    ("alg", "kind", "message"),
    [
        ("ES256", "P-256", "alg 'ES256' not allowed"),
        ("EdDSA", "Ed25519", "alg 'EdDSA' not allowed"),
        ("PS256", "RSA-3072", "alg 'PS256' not allowed"),
    ],
)
def test_other_algorithms_refused(alg: str, kind: str, message: str) -> None:
    with pytest.raises(SfrError, match=message):
        safe.verify_sfr(signed_json(alg=alg, kind=kind), keyset(srp=kind))


def test_es384_with_p521_key_refused() -> None:
    keys = SrpKeySet({"srp/k.pem": key_for("P-521").public_key()}, {"srp": "srp/k.pem"})
    with pytest.raises(SfrError, match="ES384 needs an EC P-384 key, got EC P-521"):
        safe.verify_sfr(signed_json(alg="ES384", kind="P-384"), keys)


def test_ps384_with_rsa_2048_refused() -> None:
    with pytest.raises(SfrError, match="at least 3072 bits, got RSA-2048"):
        safe.verify_sfr(signed_json(alg="PS384", kind="RSA-2048"), keyset(srp="RSA-2048"))


def test_alg_none_refused() -> None:
    head = jws.sign_compact(payload(), key_for("P-521"), alg="ES512", kid="srp").split(".")
    import base64

    none = base64.urlsafe_b64encode(b'{"alg":"none","kid":"srp"}').rstrip(b"=").decode()
    with pytest.raises(SfrError, match="alg 'none' not allowed"):
        safe.verify_sfr(f"{none}.{head[1]}.".encode(), keyset(srp="P-521"))


def test_unknown_kid_without_matching_key_refused() -> None:
    keys = SrpKeySet({"x/other.pem": ec.generate_private_key(ec.SECP521R1()).public_key()}, {})
    with pytest.raises(SfrError, match="verifies with no SRP key"):
        safe.verify_sfr(signed_json(kid="nobody"), keys)
    with pytest.raises(SfrError, match="no loaded SRP key fits"):
        safe.verify_sfr(signed_json(kid="nobody"), keyset(p384="P-384"))


def test_known_kid_never_falls_back_to_another_key() -> None:
    keys = SrpKeySet(
        {
            "a/a.pem": ec.generate_private_key(ec.SECP521R1()).public_key(),
            "b/b.pem": key_for("P-521").public_key(),
        },
        {"a": "a/a.pem"},
    )
    safe.verify_sfr(signed_json(kid="b"), keys)  # stem "b" names b/b.pem
    with pytest.raises(SfrError, match=r"a/a\.pem: kid 'a': ES512 signature does not verify"):
        safe.verify_sfr(signed_json(kid="a"), keys)


def test_key_directory_loading(tmp_path: Path) -> None:
    pem = (
        key_for("P-384")
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    (tmp_path / "Acme").mkdir()
    (tmp_path / "Acme" / "acme.pub").write_bytes(pem)
    (tmp_path / "README.md").write_text("not a key")
    keys = load_srp_keys(tmp_path, kid_table={"acme-kid": "Acme/acme.pub"})
    assert list(keys.keys) == ["Acme/acme.pub"]
    assert (
        safe.verify_sfr(signed_json(alg="ES384", kind="P-384", kid="acme-kid"), keys).key_name
        == "Acme/acme.pub"
    )
    (tmp_path / "Acme" / "broken.pem").write_text("-----BEGIN PUBLIC KEY-----\nAAAA\n")
    with pytest.raises(SfrError, match=r"broken\.pem"):
        load_srp_keys(tmp_path)
    with pytest.raises(SfrError, match="no SRP public keys are loaded"):
        safe.verify_sfr(signed_json(), load_srp_keys(tmp_path / "absent"))


@pytest.mark.parametrize("data", [b"", b"garbage", b"\xd2\x84", b"a.b.c", b"[1, 2]"])
def test_garbage_refused(data: bytes) -> None:
    with pytest.raises(SfrError):
        safe.verify_sfr(data, keyset(srp="P-521"))


# --- own fixtures: payload quirks --------------------------------------------------------------


@pytest.mark.parametrize(
    ("audit", "expected"),
    [
        ({"scope_number": 1}, "1"),
        ({"scope_number": 1.0}, "1"),
        ({"scope_number": "1"}, "1"),
        ({"scope_number": 2.5}, "2.5"),
        ({"scope_number": None}, None),
        ({"scope": 3}, "3"),
    ],
)
def test_scope_number_any_type(audit: dict[str, Any], expected: str | None) -> None:
    body = json.loads(payload())
    del body["audit"]["scope_number"]
    body["audit"].update(audit)
    report = safe.verify_sfr(signed_json(json.dumps(body).encode()), keyset(srp="P-521"))
    assert report.scope_number == expected


@pytest.mark.parametrize("typ", [{"typ": "JWT"}, {"typ": "jwt"}, {}])
def test_typ_variants_and_iat(typ: dict[str, str]) -> None:
    report = safe.verify_sfr(signed_json(payload(iat=1754594588), **typ), keyset(srp="P-521"))
    assert report.completion_date == "2025-01-02"


@pytest.mark.parametrize(
    ("device", "sha384", "sha512", "usable"),
    [
        ({"fw_hash_sha2_384": "", "fw_hash_sha2_512": ""}, None, None, False),
        ({"fw_hash_sha2_384": "", "fw_hash_sha2_512": "ab" * 32}, None, None, False),  # sha256-size
        ({"fw_hash_sha2_384": H384.upper(), "fw_hash_sha2_512": ""}, H384, None, True),
        ({"fw_hash_sha2_384": "0x" + H384}, H384, H512, True),
        ({"fw_hash_sha2_384": H384 + "0", "fw_hash_sha2_512": 7}, None, None, False),
        ({"fw_hash_sha2_384": "zz" * 48}, None, H512, True),
    ],
)
def test_hash_quirks(
    device: dict[str, Any], sha384: str | None, sha512: str | None, usable: bool
) -> None:
    report = safe.verify_sfr(signed_json(payload(device)), keyset(srp="P-521"))
    assert (report.fw_sha384, report.fw_sha512) == (sha384, sha512)
    assert safe.image_matches(report, sha384=H384, sha512=H512) is usable
    assert safe.image_matches(report, sha384="ef" * 48, sha512="01" * 64) is False
    # the 64-hex value in the 512 field is a prefix of this image's sha512: still no match
    assert safe.image_matches(report, sha384="ef" * 48, sha512="ab" * 64) is False


def report(
    sha384: str | None = H384, sha512: str | None = H512, issues: tuple[SfrIssue, ...] = ()
) -> SfrReport:
    return SfrReport(
        "jws", "k", "k.pem", None, None, None, sha384, sha512, issues, None, None, None, None
    )


def test_image_matches_rules() -> None:
    assert safe.image_matches(report(), sha384=H384.upper(), sha512=H512)
    assert safe.image_matches(report(), sha384=H384)  # image sha512 unknown: 384 suffices
    assert not safe.image_matches(report(), sha384=H384, sha512="00" * 64)  # one differs
    assert safe.image_matches(report(sha384=None), sha384="00" * 48, sha512=H512)
    assert not safe.image_matches(report(sha384=None), sha384=H384)  # nothing comparable
    with pytest.raises(ValueError, match="96/128 hex"):
        safe.image_matches(report(), sha384="abc")


def test_blocking_issues_at_the_ceiling() -> None:
    def issue(score: float | None) -> SfrIssue:
        return SfrIssue(f"s{score}", score, None, None, None)

    issues = (issue(6.9), issue(7.0), issue(9.8), issue(None))
    blocked = safe.blocking_issues(report(issues=issues), 7.0)
    assert [i.cvss_score for i in blocked] == [7.0, 9.8, None]
    assert safe.blocking_issues(report(issues=issues), 10.0) == (issue(None),)
    with pytest.raises(ValueError, match="not finite"):
        safe.blocking_issues(report(issues=issues), float("nan"))


@pytest.mark.parametrize(
    ("raw", "score"),
    [
        ("7.9", 7.9),
        (8, 8.0),
        ("  5 ", 5.0),
        ("N/A", None),
        ("", None),
        (None, None),
        (True, None),
        ("11", None),
        ("-1", None),
        ("nan", None),
        ([7], None),
    ],
)
def test_issue_scores_fail_closed(raw: Any, score: float | None) -> None:
    issues = [{"title": "t", "cvss_score": raw, "cvss_vector": "AV:L", "cwe": "CWE-1", "cve": None}]
    got = safe.verify_sfr(signed_json(payload(audit={"issues": issues})), keyset(srp="P-521"))
    assert got.issues == (SfrIssue("t", score, "AV:L", "CWE-1", None),)
    assert bool(safe.blocking_issues(got, 9.0)) is (score is None)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"[1]", "lacks the 'device' and 'audit'"),
        (b"not json", "not JSON"),
        (b'{"device":{},"audit":{},"audit":{}}', "duplicate member"),
        (payload(audit={"issues": None}), "audit.issues is missing"),
        (payload(audit={"issues": ["x"]}), "audit.issues is missing"),
    ],
)
def test_malformed_payload_refused_after_verification(body: bytes, message: str) -> None:
    with pytest.raises(SfrError, match=message):
        safe.verify_sfr(signed_json(body), keyset(srp="P-521"))


# --- own fixtures: the CoRIM form --------------------------------------------------------------

PROFILE = cbor2.CBORTag(111, bytes.fromhex("060A2B0601040182F4170101"))


def sfr_corim(
    digests: list[Any], issues: list[Any] | None = None, *, profile: Any = PROFILE, copies: int = 1
) -> bytes:
    env = {0: {1: "ACME", 2: "Trap"}}
    sfr = {
        0: "2.0",
        1: "1.0",
        2: datetime(2026, 4, 20, 4, tzinfo=UTC),
        3: 1,
        4: [{0: {0: "9.9.9", 1: "semver"}, 1: digests[:1]}],
        **({5: issues} if issues else {}),
    }
    record = [[[env, [{1: {2: digests}}]]], [[env, [{1: {-1: sfr}}]] for _ in range(copies)]]
    comid = {1: {0: "c"}, 4: {10: [record]}}
    body = {
        0: "sfr-1",
        1: [cbor2.CBORTag(506, cbor2.dumps(comid))],
        3: profile,
        5: [{0: "Reviewer Inc.", 2: [1]}],
    }
    return cbor2.dumps(cbor2.CBORTag(501, body))


def sign_cose_sign(body: bytes, key: PrivateKeyTypes, unprotected: dict[Any, Any]) -> bytes:
    """Like the real Tetrel reports: tag 98, empty protected headers, no alg."""
    tbs = cbor2.dumps(["Signature", b"", b"", b"", body])
    sig = jws.create_signature("ES512", key, tbs)
    return cbor2.dumps(cbor2.CBORTag(98, [b"", {}, body, [[b"", unprotected, sig]]]))


DIGESTS = [[-43, bytes.fromhex(H384)], [-44, bytes.fromhex(H512)]]


def test_corim_sign1_form() -> None:
    issues = [
        {0: "Bug", 1: "d", 2: {0: "7.9", 1: "AV:L", 2: "3.1"}, 3: "CWE-111"},
        {0: "Glitch", 1: "d", 2: {0: "Moderate"}},
    ]  # JIL: no CVSS score -> blocks
    data = cose.sign1(sfr_corim(DIGESTS, issues), key_for("P-384"), alg=-35, kid=b"srp")
    got = safe.verify_sfr(data, keyset(srp="P-384"))
    assert (got.form, got.kid, got.vendor, got.product, got.fw_version) == (
        "corim",
        "srp",
        "ACME",
        "Trap",
        "9.9.9",
    )
    assert (got.fw_sha384, got.fw_sha512, got.srp) == (H384, H512, "Reviewer Inc.")
    assert (got.completion_date, got.scope_number, got.framework_version) == (
        "2026-04-20",
        "1",
        "2.0",
    )
    assert got.issues == (
        SfrIssue("Bug", 7.9, "AV:L", "CWE-111", None),
        SfrIssue("Glitch", None, None, None, None),
    )
    assert [i.title for i in safe.blocking_issues(got, 8.0)] == ["Glitch"]


def test_corim_cose_sign_without_alg_like_tetrel() -> None:
    data = sign_cose_sign(sfr_corim(DIGESTS), key_for("P-521"), {4: b"srp"})
    assert safe.verify_sfr(data, keyset(srp="P-521")).key_name == "srp/P-521.pem"
    anonymous = sign_cose_sign(sfr_corim(DIGESTS), key_for("P-521"), {})
    assert safe.verify_sfr(anonymous, keyset(other="P-521")).kid is None  # no kid: any key


@pytest.mark.parametrize(
    ("unprotected", "message"),
    [
        ({4: b"renamed"}, "unauthenticated kid 'renamed' names no loaded SRP key"),
        ({4: b"srp", 5: b"iv"}, "only kid"),
        ({4: b"srp", 33: b"cert"}, "only kid"),
    ],
)
def test_corim_unauthenticated_headers_refused(unprotected: dict[int, Any], message: str) -> None:
    data = sign_cose_sign(sfr_corim(DIGESTS), key_for("P-521"), unprotected)
    with pytest.raises(SfrError, match=message):
        safe.verify_sfr(data, keyset(srp="P-521"))


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (sfr_corim(DIGESTS, profile=cbor2.CBORTag(111, b"\x2a\x03")), "not the OCP S.A.F.E. SFR"),
        (sfr_corim(DIGESTS, copies=2), "exactly one SFR"),
        (sfr_corim([*DIGESTS, [-43, b"\x01" * 48]]), "2 different digests"),
        (cbor2.dumps({0: "x"}), "tag 501"),
    ],
)
def test_corim_payload_refusals(body: bytes, message: str) -> None:
    data = cose.sign1(body, key_for("P-384"), alg=-35, kid=b"srp")
    with pytest.raises(SfrError, match=message):
        safe.verify_sfr(data, keyset(srp="P-384"))


def test_corim_malformed_digest_tolerated_never_matches() -> None:
    digests = [[-43, b"\x01" * 47], [-44, bytes.fromhex(H512)], [-16, b"\x00" * 32]]
    data = cose.sign1(sfr_corim(digests), key_for("P-384"), alg=-35, kid=b"srp")
    got = safe.verify_sfr(data, keyset(srp="P-384"))
    assert (got.fw_sha384, got.fw_sha512) == (None, H512)
    assert safe.image_matches(got, sha384=H384, sha512=H512)
    assert not safe.image_matches(got, sha384=H384)


def test_corim_es256_refused() -> None:
    data = cose.sign1(sfr_corim(DIGESTS), key_for("P-256"), alg=-7, kid=b"srp")
    with pytest.raises(SfrError, match="alg -7 is not allowed"):
        safe.verify_sfr(data, keyset(srp="P-256"))
