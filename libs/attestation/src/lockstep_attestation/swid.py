"""Verify TCG SWID RIMs (ISO/IEC 19770-2:2015 tags) signed with enveloped XMLDSig, as NVIDIA
ships them for GPU VBIOS and driver measurements.

Order of work, each step failing closed with a :class:`RimError` that says what failed:

1. parse safely: no network, no DTD, no entity expansion, and any DOCTYPE is refused;
2. the one ``ds:Signature`` must be the root's child and have exactly the expected shape:
   C14N 1.1, an allowed SignatureMethod, one Reference ``URI=""`` whose transforms are
   enveloped-signature (then optionally C14N 1.1), an allowed DigestMethod, KeyInfo holding only
   X509Data. Anything else (a second Reference, XPath transforms, KeyValue, Object) is the
   raw material of signature-wrapping attacks (XMLDSig Best Practices, sections 2.1-2.3);
3. the X509Data chain is checked with :mod:`.x509chain` at time ``at``;
4. signxml verifies the signature against that validated leaf, at ``at``, with the algorithms
   pinned;
5. everything returned is read from signxml's ``signed_xml`` only ("see what is signed").
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, cast

from cryptography import x509
from lxml import etree  # type: ignore[import-untyped]  # no stubs: typed through XmlElement
from signxml.algorithms import DigestAlgorithm, SignatureMethod
from signxml.exceptions import InvalidCertificate, InvalidDigest, SignXMLException
from signxml.verifier import SignatureConfiguration, XMLVerifier

from lockstep_attestation.x509chain import MAX_CHAIN_LENGTH, ChainError, validate_chain

SWID_NS = "http://standards.iso.org/iso/19770/-2/2015/schema.xsd"
DS_NS = "http://www.w3.org/2000/09/xmldsig#"
# TCG Reference Integrity Manifest (RIM) Information Model, the ``rim:`` Meta attributes.
RIM_NS = "https://trustedcomputinggroup.org/resource/tcg-reference-integrity-manifest-rim-information-model/"
C14N11 = "http://www.w3.org/2006/12/xml-c14n11"
ENVELOPED = "http://www.w3.org/2000/09/xmldsig#enveloped-signature"
# Never SHA-1 or MD5 (XMLDSig 1.1 section 6.1 keeps SHA-1 for legacy verification only).
_METHODS = ("ECDSA_SHA384", "ECDSA_SHA512", "RSA_SHA384", "RSA_SHA512")
SIGNATURE_METHODS = {SignatureMethod[n].value: SignatureMethod[n] for n in _METHODS}
DIGEST_METHODS = {d.value: d for d in (DigestAlgorithm.SHA384, DigestAlgorithm.SHA512)}
# The TCG RIM IM names a measurement's hash by the xmlenc URI of its algorithm, used as the
# namespace of the Hash0..HashN attributes (NVIDIA: ``xmlenc#sha384``).
HASH_NAMESPACES = {
    "http://www.w3.org/2001/04/xmlenc#sha256": ("sha256", 32),
    "http://www.w3.org/2001/04/xmlenc#sha384": ("sha384", 48),
    "http://www.w3.org/2001/04/xmlenc#sha512": ("sha512", 64),
}
_DS, _SWID = f"{{{DS_NS}}}", f"{{{SWID_NS}}}"  # Clark-notation prefixes
MAX_RIM_BYTES = 4 * 1024 * 1024
MAX_ALTERNATIVES = 16
_HASH_ATTR = re.compile(r"\{([^}]*)\}Hash(0|[1-9][0-9]?)")
_HEX = re.compile(r"[0-9a-fA-F]*")


class RimError(ValueError):
    """The RIM is not acceptable; the message names what failed."""


class XmlElement(Protocol):
    """The part of ``lxml.etree._Element`` used here (lxml ships no type stubs)."""

    @property
    def tag(self) -> str: ...  # str for elements; iterchildren("*") yields only elements
    @property
    def attrib(self) -> MutableMapping[str, str]: ...
    @property
    def text(self) -> str | None: ...
    def get(self, key: str) -> str | None: ...
    def set(self, key: str, value: str) -> None: ...
    def iterchildren(self, tag: str = ...) -> Iterator[XmlElement]: ...
    def iter(self, tag: str = ...) -> Iterator[XmlElement]: ...
    def append(self, element: XmlElement) -> None: ...
    def remove(self, element: XmlElement) -> None: ...


@dataclass(frozen=True, slots=True)
class Measurement:
    """One ``Resource type="Measurement"``: the acceptable digests for one measurement index."""

    index: int
    name: str
    active: bool
    alternatives: tuple[str, ...]  # lower-case hex digests, Hash0..HashN
    algorithm: str  # "sha384" (from the attributes' xmlenc namespace)


@dataclass(frozen=True, slots=True)
class SwidRim:
    """What a verified RIM says, read only from the signed data."""

    name: str
    tag_id: str
    version: str
    colloquial_version: str
    product: str
    manufacturer: str
    measurements: tuple[Measurement, ...]
    leaf_subject: str
    leaf_not_after: datetime


def _parser() -> Any:
    return etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False)


def parse_xml(xml: bytes) -> XmlElement:
    """Parse untrusted XML: no network, no DTD, no entities, and no DOCTYPE at all.

    Raises:
        RimError: too large, not well-formed, or carrying a DOCTYPE or entity reference.
    """
    if len(xml) > MAX_RIM_BYTES:
        raise RimError(f"document is {len(xml)} bytes (limit {MAX_RIM_BYTES})")
    if b"<!DOCTYPE" in xml:  # cheap early refusal; the docinfo check below is the real one
        raise RimError("document has a DOCTYPE (DTDs and entities are refused)")
    try:
        root = etree.fromstring(xml, parser=_parser())
    except etree.XMLSyntaxError as exc:
        raise RimError(f"not well-formed XML: {exc}") from exc
    docinfo = root.getroottree().docinfo
    if docinfo.doctype or docinfo.internalDTD is not None or docinfo.externalDTD is not None:
        raise RimError("document has a DOCTYPE (DTDs and entities are refused)")
    if any(True for _ in root.iter(etree.Entity)):
        raise RimError("document has entity references")
    return cast(XmlElement, root)


def xml_bytes(element: XmlElement) -> bytes:
    """Serialize an element (for fixtures and tests)."""
    return cast(bytes, etree.tostring(element))


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _children(element: XmlElement, *expected: str) -> list[XmlElement]:
    """Element children, which must be exactly ``expected`` (qualified tags) in order."""
    kids = list(element.iterchildren("*"))
    if [k.tag for k in kids] != list(expected):
        want, found = [_local(e) for e in expected], [_local(k.tag) for k in kids]
        raise RimError(f"{_local(element.tag)} must hold exactly {want}, found {found}")
    return kids


def _count(element: XmlElement) -> int:
    return sum(1 for _ in element.iterchildren("*"))


def _algorithm(element: XmlElement) -> str:
    _children(element)  # no parameters (HMACOutputLength, InclusiveNamespaces, XPath ...)
    return element.get("Algorithm") or ""


def _check_signature(
    root: XmlElement,
) -> tuple[SignatureMethod, DigestAlgorithm, list[x509.Certificate]]:
    """Step 2: the one enveloped signature has exactly the expected shape."""
    signatures = list(root.iterchildren(_DS + "Signature"))
    if len(signatures) != 1 or sum(1 for _ in root.iter(_DS + "Signature")) != 1:
        raise RimError(
            "document must hold exactly one ds:Signature, as a child of SoftwareIdentity"
        )
    signature = signatures[0]
    signed_info, _, key_info = _children(
        signature, _DS + "SignedInfo", _DS + "SignatureValue", _DS + "KeyInfo"
    )
    c14n, sig_method, reference = _children(
        signed_info, _DS + "CanonicalizationMethod", _DS + "SignatureMethod", _DS + "Reference"
    )
    if _algorithm(c14n) != C14N11:
        raise RimError(f"CanonicalizationMethod {_algorithm(c14n)!r} is not C14N 1.1 ({C14N11})")
    method = SIGNATURE_METHODS.get(_algorithm(sig_method))
    if method is None:
        raise RimError(f"SignatureMethod {_algorithm(sig_method)!r} is not allowed")
    if reference.get("URI") != "":
        raise RimError(
            f'Reference URI must be "" (the whole document), not {reference.get("URI")!r}'
        )
    transforms, digest_method, _ = _children(
        reference, _DS + "Transforms", _DS + "DigestMethod", _DS + "DigestValue"
    )
    algs = [_algorithm(t) for t in _children(transforms, *[_DS + "Transform"] * _count(transforms))]
    if algs not in ([ENVELOPED], [ENVELOPED, C14N11]):
        raise RimError(
            f"Reference transforms must be enveloped-signature [+ C14N 1.1], found {algs}"
        )
    digest = DIGEST_METHODS.get(_algorithm(digest_method))
    if digest is None:
        raise RimError(f"DigestMethod {_algorithm(digest_method)!r} is not allowed")
    (x509_data,) = _children(key_info, _DS + "X509Data")
    if not 1 <= _count(x509_data) <= MAX_CHAIN_LENGTH:
        raise RimError(f"X509Data must hold 1..{MAX_CHAIN_LENGTH} X509Certificate elements")
    certs = []
    for element in _children(x509_data, *[_DS + "X509Certificate"] * _count(x509_data)):
        try:
            der = base64.b64decode("".join((element.text or "").split()), validate=True)
            certs.append(x509.load_der_x509_certificate(der))
        except ValueError as exc:
            raise RimError(f"X509Certificate is not a DER certificate: {exc}") from exc
    return method, digest, certs


def _verify_signature(
    xml: bytes, leaf: x509.Certificate, alg: tuple[SignatureMethod, DigestAlgorithm], at: datetime
) -> XmlElement:
    """Step 4: signxml checks digest and signature with the validated leaf, at time ``at``."""
    config = SignatureConfiguration(
        require_x509=True,
        location="./",  # the Signature is a child of the root (enveloped)
        expect_references=1,
        signature_methods=frozenset({alg[0]}),
        digest_algorithms=frozenset({alg[1]}),
        verification_time=at,  # signxml checks the leaf's validity window at this instant
    )
    try:
        result = XMLVerifier().verify(xml, x509_cert=leaf, parser=_parser(), expect_config=config)
    except InvalidDigest as exc:
        raise RimError(f"signature: reference digest mismatch, content changed ({exc})") from exc
    except InvalidCertificate as exc:
        raise RimError(f"signature: time: {exc}") from exc
    except (SignXMLException, etree.LxmlError, ValueError) as exc:
        raise RimError(f"signature: {type(exc).__name__}: {exc}") from exc
    if isinstance(result, list) or result.signed_xml is None:
        raise RimError("signature: signxml returned no single signed XML document")
    return cast(XmlElement, result.signed_xml)


def _required(element: XmlElement, attribute: str) -> str:
    value = element.get(attribute)
    if not value:
        raise RimError(f"{_local(element.tag)}: missing attribute {attribute!r}")
    return value


def _int(element: XmlElement, attribute: str, low: int, high: int) -> int:
    text = _required(element, attribute)
    if not text.isdigit() or not low <= int(text) <= high:
        raise RimError(f"Resource: {attribute}={text!r} is not an integer in [{low}, {high}]")
    return int(text)


def _measurement(resource: XmlElement) -> Measurement:
    """One ``Resource type="Measurement"`` (TCG RIM IM; NVIDIA: Hash0..HashN alternatives)."""
    if resource.get("type") != "Measurement":
        raise RimError(f"Resource: unsupported type {resource.get('type')!r}")
    index = _int(resource, "index", 0, 1_000_000)
    active_text = _required(resource, "active").lower()
    if active_text not in ("true", "false"):
        raise RimError(f"Resource index {index}: active={active_text!r} is not True/False")
    count = _int(resource, "alternatives", 1, MAX_ALTERNATIVES)
    matches = [(m, v) for k, v in resource.attrib.items() if (m := _HASH_ATTR.fullmatch(k))]
    namespaces = {m.group(1) for m, _ in matches}
    found = {int(m.group(2)): v.lower() for m, v in matches}
    where = f"Resource index {index}"
    if len(namespaces) != 1 or not namespaces <= HASH_NAMESPACES.keys():
        raise RimError(f"{where}: hash attributes in namespaces {sorted(namespaces)}")
    algorithm, size = HASH_NAMESPACES[namespaces.pop()]
    if sorted(found) != list(range(count)) or len(matches) != count:
        raise RimError(f"{where}: alternatives={count} but Hash indices {sorted(found)}")
    if resource.get("size") not in (None, str(size)):
        raise RimError(f"{where}: size={resource.get('size')!r}, {algorithm} is {size}")
    digests = tuple(found[i] for i in range(count))
    for value in digests:
        if len(value) != 2 * size or not _HEX.fullmatch(value):
            raise RimError(f"{where}: {value!r} is not a {algorithm} hex digest")
    return Measurement(
        index, _required(resource, "name"), active_text == "true", digests, algorithm
    )


def _read_rim(signed: XmlElement, leaf: x509.Certificate) -> SwidRim:
    """Step 5: read the RIM from the signed data only."""
    if signed.tag != _SWID + "SoftwareIdentity" or any(
        True for _ in signed.iter(_DS + "Signature")
    ):
        raise RimError("signed data is not a SoftwareIdentity without its signature")
    metas = list(signed.iterchildren(_SWID + "Meta"))
    payloads = list(signed.iterchildren(_SWID + "Payload"))
    if len(metas) != 1 or len(payloads) != 1:
        raise RimError(f"SoftwareIdentity needs one Meta and one Payload ({metas}, {payloads})")
    meta = metas[0]
    creators = [
        e.get("name") or ""
        for e in signed.iterchildren(_SWID + "Entity")
        if "softwareCreator" in (e.get("role") or "").split()
    ]
    manufacturer = meta.get(f"{{{RIM_NS}}}PlatformManufacturerStr") or "".join(creators[:1])
    if not manufacturer:
        raise RimError("Meta: no rim:PlatformManufacturerStr and no softwareCreator Entity")
    resources = list(payloads[0].iterchildren("*"))
    if any(r.tag != _SWID + "Resource" for r in resources):
        raise RimError("Payload may hold only Resource elements")
    measurements = sorted((_measurement(r) for r in resources), key=lambda m: m.index)
    if len({m.index for m in measurements}) != len(measurements):
        raise RimError("Payload: duplicate measurement index")
    return SwidRim(
        name=_required(signed, "name"),
        tag_id=_required(signed, "tagId"),
        version=_required(signed, "version"),
        colloquial_version=_required(meta, "colloquialVersion"),
        product=_required(meta, "product"),
        manufacturer=manufacturer,
        measurements=tuple(measurements),
        leaf_subject=leaf.subject.rfc4514_string(),
        leaf_not_after=leaf.not_valid_after_utc,
    )


def verify_swid_rim(xml: bytes, *, trust_anchor: x509.Certificate, at: datetime) -> SwidRim:
    """Verify a signed SWID RIM and return what its signed part says.

    Args:
        xml: the ``.swidtag`` document.
        trust_anchor: the configured RIM root (NVIDIA: ``verifier_RIM_root.pem``).
        at: the verification time (timezone-aware): the chain and the leaf must be valid then.
            NVIDIA's leaves live two years, so verifying an archived RIM needs a past ``at``.

    Returns:
        The RIM, read only from the data the signature covers.

    Raises:
        RimError: naming the element, algorithm URI, chain link, signature or time that failed.
    """
    if at.tzinfo is None:
        raise RimError("time: the verification time must be timezone-aware")
    root = parse_xml(xml)
    if root.tag != _SWID + "SoftwareIdentity":
        raise RimError(f"root element is {root.tag}, not a 2015 SWID SoftwareIdentity")
    method, digest, certificates = _check_signature(root)  # step 2
    try:
        leaf = validate_chain(certificates, anchor=trust_anchor, at=at)
    except ChainError as exc:
        raise RimError(f"certificate chain: {exc}") from exc
    return _read_rim(_verify_signature(xml, leaf, (method, digest), at), leaf)


def rim_matches(rim: SwidRim, image_sha384: str) -> bool:
    """Whether any *active* SHA-384 measurement alternative equals ``image_sha384``.

    For NVIDIA VBIOS and driver RIMs the measurements are of runtime measurement blocks (what
    the GPU's SPDM report measures), not of the ``.fwpkg`` or driver file, so an image digest is
    normally absent: a bundle's policy decides whether one must appear. This is only the
    comparison. Inactive measurements are not enforced by the RIM, so they never match.

    Raises:
        ValueError: ``image_sha384`` is not 96 hex characters.
    """
    digest = image_sha384.strip().lower()
    if len(digest) != 96 or not _HEX.fullmatch(digest):
        raise ValueError(f"not a SHA-384 hex digest: {image_sha384!r}")
    return any(
        m.active and m.algorithm == "sha384" and digest in m.alternatives for m in rim.measurements
    )
