"""Signed SWID RIMs shaped like NVIDIA's, with a 4-level P-384 chain made on the spot.

The chain mirrors NVIDIA's real one (names, dates, extensions), including its one quirk: the two
intermediates encode their validity dates as GeneralizedTime although they are before 2050
(RFC 5280 section 4.1.2.5 wants UTCTime). cryptography's ``CertificateBuilder`` always writes
UTCTime there, so :func:`_with_generalized_time` re-encodes the TBS and re-signs it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509.oid import NameOID
from signxml.algorithms import (
    CanonicalizationMethod,
    DigestAlgorithm,
    SignatureConstructionMethod,
    SignatureMethod,
)
from signxml.signer import XMLSigner

from lockstep_attestation.swid import HASH_NAMESPACES, RIM_NS, SWID_NS, parse_xml, xml_bytes

SHA384_NS = "http://www.w3.org/2001/04/xmlenc#sha384"
# NVIDIA's real validity windows (standards.md 5.1); a time inside all of them:
INSIDE_VALIDITY = datetime(2024, 6, 1, tzinfo=UTC)
ROOT_VALIDITY = (datetime(2023, 3, 16, 15, 37, 34, tzinfo=UTC), datetime(2053, 3, 8, tzinfo=UTC))
CA_VALIDITY = (datetime(2023, 5, 11, tzinfo=UTC), datetime(2033, 5, 11, 23, 59, 59, tzinfo=UTC))
L3_VALIDITY = (datetime(2023, 5, 11, tzinfo=UTC), datetime(2026, 11, 11, 23, 59, 59, tzinfo=UTC))
LEAF_VALIDITY = (
    datetime(2023, 6, 23, 9, 30, 33, tzinfo=UTC),
    datetime(2025, 6, 22, 9, 30, 33, tzinfo=UTC),
)
CA_USAGE = x509.KeyUsage(False, False, False, False, False, True, True, False, False)
SIGNER_USAGE = x509.KeyUsage(True, False, False, False, False, False, False, False, False)


@dataclass(frozen=True, slots=True)
class Issued:
    """A certificate and its private key."""

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey


@dataclass(frozen=True, slots=True)
class RimChain:
    """NVIDIA's shape: leaf <- L3 <- CA <- root."""

    root: Issued
    ca: Issued
    l3: Issued
    leaf: Issued

    @property
    def x509data(self) -> tuple[x509.Certificate, ...]:
        """The certificates in NVIDIA's X509Data order (leaf first, root last)."""
        return (self.leaf.cert, self.l3.cert, self.ca.cert, self.root.cert)


def _name(cn: str, *, org: str = "NVIDIA Corporation") -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.COUNTRY_NAME, "US"),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, org),
            x509.NameAttribute(NameOID.COMMON_NAME, cn),
        ]
    )


def _der(tag: int, content: bytes) -> bytes:
    n = len(content)
    if n < 0x80:
        return bytes([tag, n]) + content
    size = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([tag, 0x80 | len(size)]) + size + content


def _tlv(data: bytes, at: int) -> tuple[int, int]:
    """(content start, end) of the DER element at offset ``at``."""
    first = data[at + 1]
    if first < 0x80:
        return at + 2, at + 2 + first
    n = first & 0x7F
    start = at + 2 + n
    return start, start + int.from_bytes(data[at + 2 : start], "big")


def _with_generalized_time(
    cert: x509.Certificate, issuer_key: ec.EllipticCurvePrivateKey
) -> x509.Certificate:
    """Re-encode the validity as GeneralizedTime (NVIDIA's intermediates) and re-sign."""
    tbs = cert.tbs_certificate_bytes
    body_start, body_end = _tlv(tbs, 0)
    fields, pos = [], body_start
    while pos < body_end:
        end = _tlv(tbs, pos)[1]
        fields.append(tbs[pos:end])
        pos = end
    validity_index = 4 if fields[0][0] == 0xA0 else 3  # [0] version, serial, sigAlg, issuer
    times = b"".join(
        _der(0x18, moment.strftime("%Y%m%d%H%M%SZ").encode())
        for moment in (cert.not_valid_before_utc, cert.not_valid_after_utc)
    )
    fields[validity_index] = _der(0x30, times)
    new_tbs = _der(0x30, b"".join(fields))
    signature = issuer_key.sign(new_tbs, ec.ECDSA(hashes.SHA384()))
    der = cert.public_bytes(Encoding.DER)
    outer_start, _ = _tlv(der, 0)
    alg_at = _tlv(der, outer_start)[1]
    algorithm = der[alg_at : _tlv(der, alg_at)[1]]
    return x509.load_der_x509_certificate(
        _der(0x30, new_tbs + algorithm + _der(0x03, b"\x00" + signature))
    )


def issue(
    subject: x509.Name,
    *,
    issuer: Issued | None,
    validity: tuple[datetime, datetime],
    ca: bool,
    path_length: int | None = None,
    key_usage: x509.KeyUsage | None = None,
    generalized_time: bool = False,
    extensions: Sequence[tuple[x509.ExtensionType, bool]] = (),
) -> Issued:
    """A P-384 certificate with NVIDIA's extension set (self-signed when ``issuer`` is None)."""
    key = ec.generate_private_key(ec.SECP384R1())
    signer = issuer.key if issuer else key
    issuer_name = issuer.cert.subject if issuer else subject
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    aki_source = issuer.key.public_key() if issuer else key.public_key()
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(validity[0])
        .not_valid_after(validity[1])
        .add_extension(ski, critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(aki_source), critical=False
        )
        .add_extension(x509.BasicConstraints(ca=ca, path_length=path_length), critical=True)
    )
    if key_usage is not None:
        builder = builder.add_extension(key_usage, critical=True)
    for extension, critical in extensions:
        builder = builder.add_extension(extension, critical=critical)
    if issuer is not None:
        ocsp = x509.AccessDescription(
            x509.oid.AuthorityInformationAccessOID.OCSP,
            x509.UniformResourceIdentifier("http://ocsp.ndis.nvidia.com"),
        )
        builder = builder.add_extension(x509.AuthorityInformationAccess([ocsp]), critical=False)
    cert = builder.sign(signer, hashes.SHA384())
    if generalized_time:
        cert = _with_generalized_time(cert, signer)
    return Issued(cert, key)


def _shifted(window: tuple[datetime, datetime], shift: timedelta) -> tuple[datetime, datetime]:
    return (window[0] + shift, window[1] + shift)


def make_chain(
    *,
    at: datetime | None = None,
    root: Issued | None = None,
    leaf_validity: tuple[datetime, datetime] | None = None,
    l3_is_ca: bool = True,
    leaf_key_usage: x509.KeyUsage | None = SIGNER_USAGE,
    nvidia_time_quirk: bool = True,
) -> RimChain:
    """A chain like NVIDIA's GH100 RIM chain, valid at ``at``.

    Args:
        at: the chain is valid then (default: now). NVIDIA's validity windows are shifted so
            that ``at`` sits where :data:`INSIDE_VALIDITY` sits in the real ones:
            ``make_chain(at=INSIDE_VALIDITY)`` has exactly NVIDIA's dates.
        root: reuse this root (to share one anchor between chains).
        leaf_validity: the leaf's window, as given (not shifted).
        l3_is_ca: False makes the L3 intermediate a non-CA (an invalid chain).
        leaf_key_usage: the leaf's KeyUsage (None: no extension).
        nvidia_time_quirk: encode the intermediates' dates as GeneralizedTime, like NVIDIA.

    Returns:
        root, GH100 CA, L3 and leaf, each with its key.
    """
    moment = at if at is not None else datetime.now(UTC)
    shift = timedelta(seconds=round((moment - INSIDE_VALIDITY).total_seconds()))
    if root is None:
        root = issue(
            _name("NVIDIA CoRIM signing Root CA", org="NVIDIA"),
            issuer=None,
            validity=_shifted(ROOT_VALIDITY, shift),
            ca=True,
            key_usage=CA_USAGE,
        )
    ca = issue(
        _name("NVIDIA Reference Value GH100 CA"),
        issuer=root,
        validity=_shifted(CA_VALIDITY, shift),
        ca=True,
        key_usage=CA_USAGE,
        generalized_time=nvidia_time_quirk,
    )
    l3 = issue(
        _name("NVIDIA Reference Value L3 GH100 001"),
        issuer=ca,
        validity=_shifted(L3_VALIDITY, shift),
        ca=l3_is_ca,
        path_length=0 if l3_is_ca else None,
        key_usage=CA_USAGE,
        generalized_time=nvidia_time_quirk,
    )
    leaf = issue(
        _name("HCC RIM L4 Signer"),
        issuer=l3,
        validity=leaf_validity or _shifted(LEAF_VALIDITY, shift),
        ca=False,
        key_usage=leaf_key_usage,
    )
    return RimChain(root, ca, l3, leaf)


def root_pem(chain: RimChain) -> bytes:
    """The chain's root in PEM: the trust anchor to configure."""
    return chain.root.cert.public_bytes(Encoding.PEM)


@dataclass(frozen=True, slots=True)
class FixtureMeasurement:
    """One measurement to write (hex digests, Hash0..HashN)."""

    index: int
    name: str
    hashes: tuple[str, ...]
    active: bool = True


def sha384_hex(label: str) -> str:
    """A deterministic SHA-384 hex digest for fixture data."""
    return hashlib.sha384(label.encode()).hexdigest()


DEFAULT_MEASUREMENTS = (
    FixtureMeasurement(0, "Measurement_0", ("00" * 48,), active=False),
    FixtureMeasurement(1, "HashedMeasurement_1_FSP", (sha384_hex("fsp-1"),)),
    FixtureMeasurement(2, "HashedMeasurement_2_FSP", (sha384_hex("fsp-2a"), sha384_hex("fsp-2b"))),
    FixtureMeasurement(3, "HashedMeasurement_3_VBIOS", (sha384_hex("vbios-3"),)),
)


def swid_document(
    measurements: Sequence[FixtureMeasurement] = DEFAULT_MEASUREMENTS,
    *,
    name: str = "GH100",
    colloquial_version: str = "96.00.74.00.14",
    hash_ns: str = SHA384_NS,
) -> bytes:
    """An unsigned SWID RIM in NVIDIA's layout (2015 namespace, rim: Meta, Measurements)."""
    size = HASH_NAMESPACES[hash_ns][1]
    resources = "".join(
        f'<Resource type="Measurement" index="{m.index}" active="{m.active}" '
        f'alternatives="{len(m.hashes)}" '
        + "".join(f'h:Hash{i}="{h}" ' for i, h in enumerate(m.hashes))
        + f'name="{m.name}" size="{size}"/>'
        for m in measurements
    )
    tag_id = hashlib.sha384(f"{name}/{colloquial_version}".encode()).hexdigest()
    return (
        f'<SoftwareIdentity xmlns="{SWID_NS}" xmlns:h="{hash_ns}" name="{name}" '
        f'tagId="{tag_id}" version="1.0" tagVersion="0">'
        '<Entity name="NVIDIA Corporation" role="softwareCreator tagCreator"/>'
        f'<Meta xmlns:rim="{RIM_NS}" colloquialVersion="{colloquial_version}" edition="GPU" '
        f'product="{name}" revision="r1" PayloadType="direct" rim:BindingSpec="RIMIM" '
        'rim:BindingSpecVersion="1.01" rim:PlatformManufacturerId="5703" '
        f'rim:PlatformManufacturerStr="NVIDIA Corporation" rim:PlatformModel="{name}"/>'
        f"<Payload>{resources}</Payload></SoftwareIdentity>"
    ).encode()


def _measurements(
    given: Sequence[str | FixtureMeasurement] | None,
) -> tuple[FixtureMeasurement, ...]:
    if given is None:
        return DEFAULT_MEASUREMENTS
    out = list(DEFAULT_MEASUREMENTS)
    for item in given:
        if isinstance(item, str):
            out.append(FixtureMeasurement(len(out), f"Measurement_{len(out)}", (item.lower(),)))
        else:
            out.append(item)
    return tuple(out)


def sign_swid(
    chain: RimChain,
    document: bytes | None = None,
    *,
    measurements: Sequence[str | FixtureMeasurement] | None = None,
    certificates: Sequence[x509.Certificate] | None = None,
    signature_method: SignatureMethod = SignatureMethod.ECDSA_SHA384,
    digest: DigestAlgorithm = DigestAlgorithm.SHA384,
) -> bytes:
    """Sign ``document`` (default :func:`swid_document`) as NVIDIA does: enveloped, C14N 1.1.

    Args:
        chain: the leaf key signs; ``certificates`` (default ``chain.x509data``) go in X509Data.
        document: the unsigned SWID XML (default: :func:`swid_document` of ``measurements``).
        measurements: when no ``document``: hex SHA-384 digests (each becomes an active
            single-alternative measurement after the defaults) or full measurements.
        certificates: override the X509Data content (to drop or add certificates).
        signature_method: the SignatureMethod.
        digest: the Reference DigestMethod.

    Returns:
        The signed ``.swidtag`` bytes.
    """
    signer = XMLSigner(
        method=SignatureConstructionMethod.enveloped,
        signature_algorithm=signature_method,
        digest_algorithm=digest,
        c14n_algorithm=CanonicalizationMethod.CANONICAL_XML_1_1,
    )
    if document is None:
        document = swid_document(_measurements(measurements))
    root = parse_xml(document)
    certs = list(certificates if certificates is not None else chain.x509data)
    return xml_bytes(signer.sign(root, key=chain.leaf.key, cert=certs))
