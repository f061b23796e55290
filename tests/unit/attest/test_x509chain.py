"""The RIM chain validator, on a chain shaped like NVIDIA's (including its time-encoding quirk)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509.oid import ObjectIdentifier
from cryptography.x509.verification import (
    Criticality,
    ExtensionPolicy,
    PolicyBuilder,
    Store,
    VerificationError,
)
from signxml.exceptions import InvalidCertificate
from signxml.verifier import SignatureConfiguration, XMLVerifier

from lockstep_attest.testing.rim_fixtures import (
    CA_USAGE,
    INSIDE_VALIDITY,
    LEAF_VALIDITY,
    SIGNER_USAGE,
    RimChain,
    issue,
    make_chain,
    sign_swid,
)
from lockstep_attestation.x509chain import ChainError, is_anchor, validate_chain

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def chain() -> RimChain:
    return make_chain(at=INSIDE_VALIDITY)


def _validity_der(cert: x509.Certificate, kinds: str) -> bytes:
    """The DER Validity of ``cert`` with each time as GeneralizedTime "G" or UTCTime "U"."""
    encodings = {"G": (b"\x18\x0f", "%Y%m%d%H%M%SZ"), "U": (b"\x17\x0d", "%y%m%d%H%M%SZ")}
    times = b"".join(
        encodings[kind][0] + moment.strftime(encodings[kind][1]).encode()
        for kind, moment in zip(
            kinds, (cert.not_valid_before_utc, cert.not_valid_after_utc), strict=True
        )
    )
    return bytes([0x30, len(times)]) + times


def test_nvidia_shaped_chain_validates(chain: RimChain) -> None:
    assert (
        validate_chain(chain.x509data, anchor=chain.root.cert, at=INSIDE_VALIDITY)
        == chain.leaf.cert
    )


@pytest.mark.parametrize(
    "order", [(3, 2, 1, 0), (1, 0, 3, 2), (0, 1, 2)], ids=["reversed", "shuffled", "no-root"]
)
def test_x509data_order_does_not_matter(chain: RimChain, order: tuple[int, ...]) -> None:
    certs = [chain.x509data[i] for i in order]
    assert validate_chain(certs, anchor=chain.root.cert, at=INSIDE_VALIDITY) == chain.leaf.cert


def test_fixture_has_nvidias_generalized_time_quirk(chain: RimChain) -> None:
    # As in NVIDIA's chain: intermediates GeneralizedTime before 2050 (against RFC 5280
    # 4.1.2.5), leaf UTCTime, root UTCTime then GeneralizedTime for 2053 (correct).
    expected = {
        chain.l3.cert: "GG",
        chain.ca.cert: "GG",
        chain.leaf.cert: "UU",
        chain.root.cert: "UG",
    }
    for cert, kinds in expected.items():
        assert _validity_der(cert, kinds) in cert.public_bytes(Encoding.DER)


def _client_verify(chain: RimChain) -> None:
    def digital_signature(_policy: object, _cert: object, usage: x509.KeyUsage) -> None:
        if not usage.digital_signature:
            raise ValueError("no digitalSignature")

    ee = ExtensionPolicy.permit_all().require_present(
        x509.KeyUsage, Criticality.AGNOSTIC, digital_signature
    )
    builder = (
        PolicyBuilder()
        .store(Store([chain.root.cert]))
        .time(INSIDE_VALIDITY)
        .extension_policies(ee_policy=ee, ca_policy=ExtensionPolicy.webpki_defaults_ca())
    )
    builder.build_client_verifier().verify(chain.leaf.cert, [chain.l3.cert, chain.ca.cert])


def test_cryptography_rejects_only_because_of_the_time_encoding() -> None:
    """Why x509chain exists: the same chain passes cryptography's verifier (with signxml's
    policies) once the intermediates use UTCTime; with NVIDIA's GeneralizedTime it cannot."""
    _client_verify(make_chain(at=INSIDE_VALIDITY, nvidia_time_quirk=False))
    with pytest.raises(VerificationError, match="must be UtcTime"):
        _client_verify(make_chain(at=INSIDE_VALIDITY))


def test_signxml_ca_pem_file_blames_the_roots_key_usage(chain: RimChain, tmp_path: Path) -> None:
    """signxml retries with X509Data reversed, so the root is judged as an end entity."""
    pem = tmp_path / "root.pem"
    pem.write_bytes(chain.root.cert.public_bytes(Encoding.PEM))
    config = SignatureConfiguration(verification_time=INSIDE_VALIDITY)
    with pytest.raises(InvalidCertificate, match="KeyUsage does not allow digitalSignature"):
        XMLVerifier().verify(sign_swid(chain), ca_pem_file=str(pem), expect_config=config)


def test_expired_leaf(chain: RimChain) -> None:
    after = LEAF_VALIDITY[1] + timedelta(seconds=1)
    with pytest.raises(ChainError, match=r"HCC RIM L4 Signer[^:]*: expired at 2025-06-22"):
        validate_chain(chain.x509data, anchor=chain.root.cert, at=after)


def test_leaf_not_yet_valid(chain: RimChain) -> None:
    before = LEAF_VALIDITY[0] - timedelta(seconds=1)
    with pytest.raises(ChainError, match=r"HCC RIM L4 Signer[^:]*: not valid before"):
        validate_chain(chain.x509data, anchor=chain.root.cert, at=before)


def test_expired_intermediate() -> None:
    chain = make_chain(
        at=INSIDE_VALIDITY, leaf_validity=(LEAF_VALIDITY[0], datetime(2027, 1, 1, tzinfo=UTC))
    )
    with pytest.raises(ChainError, match=r"L3 GH100 001[^:]*: expired at 2026-11-11"):
        validate_chain(chain.x509data, anchor=chain.root.cert, at=datetime(2026, 12, 1, tzinfo=UTC))


def test_missing_intermediate(chain: RimChain) -> None:
    certs = [chain.leaf.cert, chain.ca.cert, chain.root.cert]
    with pytest.raises(ChainError, match="neither in X509Data nor the trust anchor"):
        validate_chain(certs, anchor=chain.root.cert, at=INSIDE_VALIDITY)


def test_other_root_with_the_same_name(chain: RimChain) -> None:
    other = make_chain(at=INSIDE_VALIDITY)
    with pytest.raises(ChainError, match="trust anchor's name but is not a certificate of its key"):
        validate_chain(other.x509data, anchor=chain.root.cert, at=INSIDE_VALIDITY)
    with pytest.raises(ChainError, match=r"GH100 CA[^:]*: signature does not verify under"):
        validate_chain(other.x509data[:3], anchor=chain.root.cert, at=INSIDE_VALIDITY)


def test_intermediate_without_ca() -> None:
    chain = make_chain(at=INSIDE_VALIDITY, l3_is_ca=False)
    with pytest.raises(
        ChainError, match=r"L3 GH100 001[^:]*: issues a certificate but is not a CA"
    ):
        validate_chain(chain.x509data, anchor=chain.root.cert, at=INSIDE_VALIDITY)


def test_leaf_without_digital_signature() -> None:
    usage = x509.KeyUsage(False, True, False, False, False, False, False, False, False)
    chain = make_chain(at=INSIDE_VALIDITY, leaf_key_usage=usage)
    with pytest.raises(
        ChainError, match=r"HCC RIM L4 Signer[^:]*: keyUsage lacks digitalSignature"
    ):
        validate_chain(chain.x509data, anchor=chain.root.cert, at=INSIDE_VALIDITY)


def test_leaf_without_key_usage_is_unrestricted() -> None:
    chain = make_chain(at=INSIDE_VALIDITY, leaf_key_usage=None)
    assert validate_chain(chain.x509data, anchor=chain.root.cert, at=INSIDE_VALIDITY)


def test_path_length_constraint(chain: RimChain) -> None:
    # L3 has pathLenConstraint 0: no CA may sit between it and the leaf.
    extra = issue(
        x509.Name.from_rfc4514_string("CN=L3.5"),
        issuer=chain.l3,
        validity=LEAF_VALIDITY,
        ca=True,
        key_usage=CA_USAGE,
    )
    leaf = issue(
        x509.Name.from_rfc4514_string("CN=Deep Signer"),
        issuer=extra,
        validity=LEAF_VALIDITY,
        ca=False,
        key_usage=SIGNER_USAGE,
    )
    certs = [leaf.cert, extra.cert, chain.l3.cert, chain.ca.cert]
    with pytest.raises(ChainError, match=r"L3 GH100 001[^:]*: pathLenConstraint 0 exceeded"):
        validate_chain(certs, anchor=chain.root.cert, at=INSIDE_VALIDITY)


def test_ca_without_key_cert_sign(chain: RimChain) -> None:
    usage = x509.KeyUsage(True, False, False, False, False, False, True, False, False)
    weak_ca = issue(
        x509.Name.from_rfc4514_string("CN=Sign-only CA"),
        issuer=chain.ca,
        validity=LEAF_VALIDITY,
        ca=True,
        key_usage=usage,
    )
    leaf = issue(
        x509.Name.from_rfc4514_string("CN=Signer"),
        issuer=weak_ca,
        validity=LEAF_VALIDITY,
        ca=False,
        key_usage=SIGNER_USAGE,
    )
    with pytest.raises(ChainError, match=r"Sign-only CA[^:]*: keyUsage lacks keyCertSign"):
        validate_chain(
            [leaf.cert, weak_ca.cert, chain.ca.cert], anchor=chain.root.cert, at=INSIDE_VALIDITY
        )


def test_unknown_critical_extension(chain: RimChain) -> None:
    odd = x509.UnrecognizedExtension(ObjectIdentifier("1.3.6.1.4.1.5703.99"), b"\x05\x00")
    leaf = issue(
        x509.Name.from_rfc4514_string("CN=Odd Signer"),
        issuer=chain.l3,
        validity=LEAF_VALIDITY,
        ca=False,
        key_usage=SIGNER_USAGE,
        extensions=[(odd, True)],
    )
    certs = [leaf.cert, chain.l3.cert, chain.ca.cert]
    with pytest.raises(
        ChainError, match=r"Odd Signer[^:]*: unprocessed critical extension 1\.3\.6"
    ):
        validate_chain(certs, anchor=chain.root.cert, at=INSIDE_VALIDITY)


def test_unrelated_extra_certificate(chain: RimChain) -> None:
    stray = make_chain(
        at=INSIDE_VALIDITY, root=chain.root
    ).l3.cert  # same names as chain.l3, other key
    with pytest.raises(ChainError, match="possible issuers"):
        validate_chain([*chain.x509data, stray], anchor=chain.root.cert, at=INSIDE_VALIDITY)
    loner = issue(
        x509.Name.from_rfc4514_string("CN=Loner"),
        issuer=chain.ca,
        validity=LEAF_VALIDITY,
        ca=False,
        key_usage=SIGNER_USAGE,
    )
    with pytest.raises(ChainError, match="exactly one end-entity certificate"):
        validate_chain([*chain.x509data, loner.cert], anchor=chain.root.cert, at=INSIDE_VALIDITY)


def test_self_signed_impostor(chain: RimChain) -> None:
    impostor = issue(
        x509.Name.from_rfc4514_string("CN=Impostor Root"),
        issuer=None,
        validity=LEAF_VALIDITY,
        ca=True,
        key_usage=CA_USAGE,
    )
    leaf = issue(
        x509.Name.from_rfc4514_string("CN=Signer"),
        issuer=impostor,
        validity=LEAF_VALIDITY,
        ca=False,
        key_usage=SIGNER_USAGE,
    )
    with pytest.raises(ChainError, match="self-signed certificate that is not the trust anchor"):
        validate_chain([leaf.cert, impostor.cert], anchor=chain.root.cert, at=INSIDE_VALIDITY)


def test_only_the_anchor_or_nothing(chain: RimChain) -> None:
    with pytest.raises(ChainError, match="no certificate other than the trust anchor"):
        validate_chain([chain.root.cert], anchor=chain.root.cert, at=INSIDE_VALIDITY)
    with pytest.raises(ChainError, match="no certificate other than the trust anchor"):
        validate_chain([], anchor=chain.root.cert, at=INSIDE_VALIDITY)


def test_naive_time_is_refused(chain: RimChain) -> None:
    with pytest.raises(ChainError, match="timezone-aware"):
        validate_chain(chain.x509data, anchor=chain.root.cert, at=datetime(2024, 6, 1))  # noqa: DTZ001


def test_is_anchor(chain: RimChain) -> None:
    assert is_anchor(chain.root.cert, chain.root.cert)
    assert not is_anchor(chain.ca.cert, chain.root.cert)


def _reissued_root(chain: RimChain, signer: ec.EllipticCurvePrivateKey) -> x509.Certificate:
    """The root's name and key in a new certificate (new validity), signed by ``signer``."""
    root = chain.root.cert
    return (
        x509.CertificateBuilder()
        .subject_name(root.subject)
        .issuer_name(root.subject)
        .public_key(chain.root.key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(root.not_valid_before_utc - timedelta(days=1))
        .not_valid_after(root.not_valid_after_utc)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(signer, hashes.SHA384())
    )


def test_a_reencoded_copy_of_the_anchor_counts_only_when_its_key_signed_it(
    chain: RimChain,
) -> None:
    # RFC 5280: a trust anchor is a name and a key, so a re-issued root is the anchor...
    assert is_anchor(_reissued_root(chain, chain.root.key), chain.root.cert)
    # ...but X509Data is outside what XMLDSig signs: a copy its key did not sign binds nothing,
    # and let a changed byte in the bundle's RIM pass unnoticed.
    forged = _reissued_root(chain, ec.generate_private_key(ec.SECP384R1()))
    assert not is_anchor(forged, chain.root.cert)
    certs = [chain.leaf.cert, chain.l3.cert, chain.ca.cert, forged]
    with pytest.raises(ChainError, match="name but is not a certificate of its key"):
        validate_chain(certs, anchor=chain.root.cert, at=INSIDE_VALIDITY)


def test_an_unknown_signature_algorithm_is_a_chain_error_not_a_crash(chain: RimChain) -> None:
    der = chain.leaf.cert.public_bytes(Encoding.DER)
    ecdsa_sha384 = bytes.fromhex("2a8648ce3d040303")  # OID 1.2.840.10045.4.3.3
    assert ecdsa_sha384 in der
    mangled = x509.load_der_x509_certificate(
        der.replace(ecdsa_sha384, bytes.fromhex("2a8648ce3d040309"))
    )
    certs = [mangled, chain.l3.cert, chain.ca.cert, chain.root.cert]
    with pytest.raises(ChainError):
        validate_chain(certs, anchor=chain.root.cert, at=INSIDE_VALIDITY)
