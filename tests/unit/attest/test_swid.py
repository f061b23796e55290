"""SWID RIM verification: a good RIM, then every way it must fail closed."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from cryptography import x509
from signxml.algorithms import DigestAlgorithm, SignatureMethod

from lockstep_attest.testing.rim_fixtures import (
    DEFAULT_MEASUREMENTS,
    INSIDE_VALIDITY,
    LEAF_VALIDITY,
    FixtureMeasurement,
    RimChain,
    make_chain,
    root_pem,
    sha384_hex,
    sign_swid,
    swid_document,
)
from lockstep_attestation.swid import (
    DS_NS,
    SWID_NS,
    RimError,
    SwidRim,
    parse_xml,
    rim_matches,
    verify_swid_rim,
    xml_bytes,
)

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def chain() -> RimChain:
    return make_chain(at=INSIDE_VALIDITY)


@pytest.fixture(scope="module")
def signed(chain: RimChain) -> bytes:
    return sign_swid(chain)


def _verify(xml: bytes, chain: RimChain, at: datetime = INSIDE_VALIDITY) -> SwidRim:
    return verify_swid_rim(xml, trust_anchor=chain.root.cert, at=at)


def _sub_once(pattern: bytes, replacement: bytes, xml: bytes) -> bytes:
    changed, count = re.subn(pattern, replacement, xml, count=1)
    assert count == 1, pattern
    return changed


def test_good_rim_verifies(chain: RimChain, signed: bytes) -> None:
    rim = _verify(signed, chain)
    assert (rim.name, rim.version, rim.product) == ("GH100", "1.0", "GH100")
    assert rim.colloquial_version == "96.00.74.00.14"
    assert rim.manufacturer == "NVIDIA Corporation"
    assert len(rim.tag_id) == 96
    assert rim.leaf_subject == chain.leaf.cert.subject.rfc4514_string()
    assert rim.leaf_not_after == LEAF_VALIDITY[1]
    assert [(m.index, m.name, m.active, m.alternatives) for m in rim.measurements] == [
        (m.index, m.name, m.active, m.hashes) for m in DEFAULT_MEASUREMENTS
    ]
    assert {m.algorithm for m in rim.measurements} == {"sha384"}


def test_rim_matches(chain: RimChain, signed: bytes) -> None:
    rim = _verify(signed, chain)
    assert rim_matches(rim, sha384_hex("fsp-2b"))  # a second alternative
    assert rim_matches(rim, sha384_hex("vbios-3").upper())
    assert not rim_matches(rim, "00" * 48)  # only in an inactive measurement
    assert not rim_matches(rim, sha384_hex("something else"))
    with pytest.raises(ValueError, match="not a SHA-384 hex digest"):
        rim_matches(rim, "abc")


def test_sha512_algorithms_are_accepted(chain: RimChain) -> None:
    xml = sign_swid(
        chain, signature_method=SignatureMethod.ECDSA_SHA512, digest=DigestAlgorithm.SHA512
    )
    assert _verify(xml, chain).measurements


def test_after_the_leaf_expired(chain: RimChain, signed: bytes) -> None:
    with pytest.raises(RimError, match=r"HCC RIM L4 Signer[^:]*: expired at 2025-06-22"):
        _verify(signed, chain, LEAF_VALIDITY[1] + timedelta(seconds=1))


def test_before_the_leaf_is_valid(chain: RimChain, signed: bytes) -> None:
    with pytest.raises(RimError, match=r"HCC RIM L4 Signer[^:]*: not valid before 2023-06-23"):
        _verify(signed, chain, LEAF_VALIDITY[0] - timedelta(seconds=1))


def test_naive_time(chain: RimChain, signed: bytes) -> None:
    with pytest.raises(RimError, match="timezone-aware"):
        _verify(signed, chain, datetime(2024, 6, 1))  # noqa: DTZ001


def test_one_measurement_digit_changed(chain: RimChain, signed: bytes) -> None:
    digest = sha384_hex("vbios-3").encode()
    tampered = signed.replace(digest, digest[:-1] + (b"0" if digest[-1:] != b"0" else b"1"))
    assert tampered != signed
    with pytest.raises(RimError, match="digest mismatch"):
        _verify(tampered, chain)


def test_signature_value_changed(chain: RimChain, signed: bytes) -> None:
    value = re.search(rb"<ds:SignatureValue>([^<]+)</ds:SignatureValue>", signed)
    assert value is not None
    text = bytearray(value.group(1))
    text[10] = ord("A") if text[10] != ord("A") else ord("B")
    tampered = signed.replace(value.group(1), bytes(text))
    with pytest.raises(RimError, match="signature: InvalidSignature"):
        _verify(tampered, chain)


def test_certificate_missing_from_x509data(chain: RimChain) -> None:
    xml = sign_swid(chain, certificates=[chain.leaf.cert, chain.ca.cert, chain.root.cert])
    with pytest.raises(RimError, match=r"certificate chain: .*L3 GH100 001.* neither in X509Data"):
        _verify(xml, chain)


def test_chain_to_a_different_root(chain: RimChain) -> None:
    other = make_chain(at=INSIDE_VALIDITY)
    with pytest.raises(
        RimError, match=r"certificate chain: .*name but is not a certificate of its key"
    ):
        _verify(sign_swid(other), chain)
    xml = sign_swid(other, certificates=other.x509data[:3])
    with pytest.raises(RimError, match=r"certificate chain: .*GH100 CA.*signature does not verify"):
        _verify(xml, chain)


def test_intermediate_without_ca(chain: RimChain) -> None:
    bad = make_chain(at=INSIDE_VALIDITY, root=chain.root, l3_is_ca=False)
    with pytest.raises(RimError, match=r"L3 GH100 001[^:]*: issues a certificate but is not a CA"):
        _verify(sign_swid(bad), chain)


def test_leaf_without_digital_signature(chain: RimChain) -> None:
    usage = x509.KeyUsage(False, True, False, False, False, False, False, False, False)
    bad = make_chain(at=INSIDE_VALIDITY, root=chain.root, leaf_key_usage=usage)
    with pytest.raises(RimError, match="lacks digitalSignature"):
        _verify(sign_swid(bad), chain)


@pytest.mark.parametrize(
    ("element", "uri"),
    [
        ("SignatureMethod", "http://www.w3.org/2000/09/xmldsig#rsa-sha1"),
        ("SignatureMethod", "http://www.w3.org/2001/04/xmldsig-more#ecdsa-sha1"),
        ("SignatureMethod", "http://www.w3.org/2001/04/xmldsig-more#rsa-md5"),
        ("SignatureMethod", "http://www.w3.org/2001/04/xmldsig-more#ecdsa-sha256"),
        ("DigestMethod", "http://www.w3.org/2000/09/xmldsig#sha1"),
        ("DigestMethod", "http://www.w3.org/2001/04/xmlenc#sha256"),
        ("CanonicalizationMethod", "http://www.w3.org/2001/10/xml-exc-c14n#"),
        ("CanonicalizationMethod", "http://www.w3.org/2006/12/xml-c14n11#WithComments"),
    ],
)
def test_algorithms_are_pinned(chain: RimChain, signed: bytes, element: str, uri: str) -> None:
    pattern = rb"(<ds:" + element.encode() + rb' Algorithm=")[^"]+"'
    tampered = _sub_once(pattern, rb"\g<1>" + uri.encode() + b'"', signed)
    with pytest.raises(RimError, match=f"{element} {re.escape(repr(uri))} is not"):
        _verify(tampered, chain)


def test_second_reference(chain: RimChain, signed: bytes) -> None:
    reference = re.search(rb"<ds:Reference .*?</ds:Reference>", signed, re.DOTALL)
    assert reference is not None
    tampered = signed.replace(reference.group(0), reference.group(0) * 2)
    with pytest.raises(RimError, match="SignedInfo must hold exactly"):
        _verify(tampered, chain)


def test_reference_to_a_fragment(chain: RimChain, signed: bytes) -> None:
    tampered = _sub_once(rb'<ds:Reference URI=""', b'<ds:Reference URI="#payload"', signed)
    with pytest.raises(RimError, match="Reference URI must be"):
        _verify(tampered, chain)


def test_extra_transform(chain: RimChain, signed: bytes) -> None:
    xpath = b'<ds:Transform Algorithm="http://www.w3.org/TR/1999/REC-xpath-19991116"/>'
    tampered = _sub_once(rb"(<ds:Transforms>)", rb"\g<1>" + xpath, signed)
    with pytest.raises(RimError, match="transforms must be enveloped-signature"):
        _verify(tampered, chain)


def test_key_value_next_to_x509data(chain: RimChain, signed: bytes) -> None:
    tampered = _sub_once(rb"(<ds:KeyInfo>)", rb"\g<1><ds:KeyName>k</ds:KeyName>", signed)
    with pytest.raises(RimError, match=r"KeyInfo must hold exactly \['X509Data'\]"):
        _verify(tampered, chain)


def test_second_payload_is_a_changed_document(chain: RimChain, signed: bytes) -> None:
    """Wrapping: a malicious Payload added next to the signed one."""
    evil = FixtureMeasurement(3, "HashedMeasurement_3_VBIOS", (sha384_hex("evil"),))
    evil_payload = re.search(rb"<Payload>.*?</Payload>", swid_document([evil]), re.DOTALL)
    assert evil_payload is not None
    tampered = signed.replace(b"<Payload>", evil_payload.group(0) + b"<Payload>", 1)
    with pytest.raises(RimError, match="digest mismatch"):
        _verify(tampered, chain)


def test_signed_document_wrapped_in_an_unsigned_one(chain: RimChain, signed: bytes) -> None:
    """Wrapping: the signed tag moved inside a new root that carries other measurements."""
    evil = swid_document([FixtureMeasurement(1, "HashedMeasurement_1_FSP", (sha384_hex("x"),))])
    outer = parse_xml(evil)
    holder = parse_xml(f'<Evidence xmlns="{SWID_NS}"/>'.encode())
    holder.append(parse_xml(signed))
    outer.append(holder)
    with pytest.raises(RimError, match="exactly one ds:Signature, as a child of SoftwareIdentity"):
        _verify(xml_bytes(outer), chain)


def test_signature_moved_into_a_copy(chain: RimChain, signed: bytes) -> None:
    """Wrapping: the signature kept at the root, the signed Payload moved under Entity."""
    root = parse_xml(signed)
    payload = next(root.iterchildren(f"{{{SWID_NS}}}Payload"))
    entity = next(root.iterchildren(f"{{{SWID_NS}}}Entity"))
    root.remove(payload)
    entity.append(payload)
    signature = next(root.iterchildren(f"{{{DS_NS}}}Signature"))
    root.remove(signature)
    evil = parse_xml(swid_document([FixtureMeasurement(1, "m", (sha384_hex("y"),))]))
    root.append(next(evil.iterchildren(f"{{{SWID_NS}}}Payload")))
    root.append(signature)
    try:
        rim = _verify(xml_bytes(root), chain)
    except RimError as exc:
        assert "digest mismatch" in str(exc)
    else:  # pragma: no cover - would be a wrapping bug
        pytest.fail(f"wrapped document verified: {rim.measurements}")


def test_comments_are_not_signed_and_not_returned(chain: RimChain, signed: bytes) -> None:
    tampered = signed.replace(b"<Payload>", b"<Payload><!-- injected -->", 1)
    assert _verify(tampered, chain).measurements == _verify(signed, chain).measurements


@pytest.mark.parametrize(
    "document",
    [
        b'<!DOCTYPE SoftwareIdentity [<!ENTITY x "boom">]><SoftwareIdentity>&x;</SoftwareIdentity>',
        b'<!DOCTYPE SoftwareIdentity SYSTEM "http://example.invalid/x.dtd"><SoftwareIdentity/>',
        '<?xml version="1.0" encoding="UTF-16"?><!DOCTYPE a [<!ENTITY e "x">]><a>&e;</a>'.encode(
            "utf-16"
        ),
    ],
    ids=["internal-entity", "external-dtd", "utf16-doctype"],
)
def test_doctype_is_refused(chain: RimChain, document: bytes) -> None:
    with pytest.raises(RimError, match="DOCTYPE"):
        _verify(document, chain)


def test_undeclared_entity_and_garbage(chain: RimChain) -> None:
    with pytest.raises(RimError, match="not well-formed"):
        _verify(b"<SoftwareIdentity>&lol;</SoftwareIdentity>", chain)
    with pytest.raises(RimError, match="not well-formed"):
        _verify(b"not xml", chain)


def test_wrong_root_and_unsigned(chain: RimChain) -> None:
    with pytest.raises(RimError, match="not a 2015 SWID SoftwareIdentity"):
        _verify(b'<SoftwareIdentity xmlns="urn:other"/>', chain)
    with pytest.raises(RimError, match="exactly one ds:Signature"):
        _verify(swid_document(), chain)


@pytest.mark.parametrize(
    ("measurements", "message"),
    [
        ([FixtureMeasurement(1, "m", ("zz" * 48,))], "is not a sha384 hex digest"),
        ([FixtureMeasurement(1, "m", ("ab" * 32,))], "is not a sha384 hex digest"),
        (
            [
                FixtureMeasurement(1, "a", (sha384_hex("a"),)),
                FixtureMeasurement(1, "b", (sha384_hex("b"),)),
            ],
            "duplicate measurement index",
        ),
    ],
    ids=["not-hex", "too-short", "duplicate-index"],
)
def test_signed_but_malformed_measurements(
    chain: RimChain, measurements: list[FixtureMeasurement], message: str
) -> None:
    with pytest.raises(RimError, match=message):
        _verify(sign_swid(chain, swid_document(measurements)), chain)


def test_alternatives_count_must_match(chain: RimChain) -> None:
    document = swid_document([FixtureMeasurement(1, "m", (sha384_hex("a"), sha384_hex("b")))])
    document = document.replace(b'alternatives="2"', b'alternatives="3"')
    with pytest.raises(RimError, match="alternatives=3 but Hash indices"):
        _verify(sign_swid(chain, document), chain)


def test_default_fixture_is_valid_now_and_takes_image_digests() -> None:
    """What the bundle builder relies on: make_chain() is valid at the current time."""
    now = datetime.now(UTC)
    chain = make_chain()
    image = sha384_hex("image")
    xml = sign_swid(chain, measurements=[image])
    rim = verify_swid_rim(xml, trust_anchor=x509.load_pem_x509_certificate(root_pem(chain)), at=now)
    assert rim_matches(rim, image)
    assert len(rim.measurements) == len(DEFAULT_MEASUREMENTS) + 1
