"""A small, explicit X.509 path validator for RIM-signing chains (RFC 5280 section 6, subset).

Why not ``cryptography.x509.verification`` (or signxml's ``ca_pem_file``, which wraps it)?
NVIDIA's real RIM chain ("HCC RIM L4 Signer" <- "NVIDIA Reference Value L3 GH100 001" <-
"NVIDIA Reference Value GH100 CA" <- "NVIDIA CoRIM signing Root CA") is rejected by it for a
reason that is *not* an extension at all: both intermediates encode their validity dates
(2023-05-11 .. 2026-11-11 and 2023-05-11 .. 2033-05-11) as GeneralizedTime, and RFC 5280
section 4.1.2.5 says dates through 2049 MUST be UTCTime. cryptography's verifier enforces that
DER-profile rule unconditionally ("validity dates between 1950 and 2049 must be UtcTime"); no
``ExtensionPolicy`` can relax it. The extensions themselves are textbook: every CA has a
critical basicConstraints cA=TRUE and a critical keyUsage keyCertSign|cRLSign, the leaf has
keyUsage digitalSignature. (With the *default* web-PKI end-entity policy the chain also fails
on the leaf's missing subjectAltName, 2.5.29.17: a TLS rule that has no meaning for a RIM
signer.) signxml 5 then retries with the X509Data list reversed, so the root is treated as the
end entity and its KeyUsage (keyCertSign, correctly without digitalSignature) is blamed: the
"certificate KeyUsage does not allow digitalSignature" message is a symptom, not the cause.
(Found by running NVIDIA's 26 sample chains through ``PolicyBuilder``; the test fixtures
reproduce the encoding, and the same chain with UTCTime passes cryptography's CA policy.)

The time encoding is a profile violation by the issuing CA, not a weakness: the instant is
unambiguous and is still checked against ``at``. Every semantic rule below is enforced.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

MAX_CHAIN_LENGTH = 8
"""Most certificates a path may hold, anchor included (NVIDIA's has 4)."""

# RFC 5280 section 4.2: a certificate-using system MUST reject a certificate with a critical
# extension it does not process. These are the only two this validator processes.
_PROCESSED_CRITICAL = frozenset({x509.BasicConstraints.oid, x509.KeyUsage.oid})
_WEAK_HASHES = (hashes.SHA1, hashes.MD5)


class ChainError(ValueError):
    """The certificate path is not valid; the message names the certificate and the rule."""


def _name(cert: x509.Certificate) -> str:
    return cert.subject.rfc4514_string() or "<empty subject>"


def _spki(cert: x509.Certificate) -> bytes:
    return cert.public_key().public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)


def is_anchor(cert: x509.Certificate, anchor: x509.Certificate) -> bool:
    """Whether ``cert`` is the configured trust anchor: the same bytes, or a copy with the same
    subject and key (RFC 5280 6.1.1 (d): a trust anchor is a name and a key) that the anchor's
    key signed.

    The signature matters: X509Data is outside what XMLDSig signs, so nothing else binds the
    copy's bytes, and a changed copy (a flipped byte in its validity or extensions) would
    otherwise pass unnoticed.

    Args:
        cert: a certificate from the signature.
        anchor: the configured root.

    Returns:
        True when ``cert`` stands for ``anchor``.
    """
    if cert.public_bytes(Encoding.DER) == anchor.public_bytes(Encoding.DER):
        return True
    if cert.subject != anchor.subject or _spki(cert) != _spki(anchor):
        return False
    try:
        cert.verify_directly_issued_by(anchor)
    except (InvalidSignature, UnsupportedAlgorithm, ValueError, TypeError):
        return False
    return True


def _extension(
    cert: x509.Certificate, kind: type[x509.ExtensionType]
) -> x509.Extension[x509.ExtensionType] | None:
    try:
        return cert.extensions.get_extension_for_class(kind)
    except x509.ExtensionNotFound:
        return None
    except ValueError as exc:  # duplicate or undecodable extensions
        raise ChainError(f"{_name(cert)}: malformed extensions ({exc})") from exc


def _is_ca(cert: x509.Certificate) -> bool:
    bc = _extension(cert, x509.BasicConstraints)
    return bc is not None and isinstance(bc.value, x509.BasicConstraints) and bc.value.ca


def _check_common(cert: x509.Certificate, at: datetime) -> None:
    """Rules for every certificate in the path, anchor included."""
    who = _name(cert)
    # RFC 5280 6.1.3 (a)(2): the validity period includes the verification time.
    if at < cert.not_valid_before_utc:
        raise ChainError(
            f"{who}: not valid before {cert.not_valid_before_utc.isoformat()} "
            f"(verification time {at.isoformat()})"
        )
    if at > cert.not_valid_after_utc:
        raise ChainError(
            f"{who}: expired at {cert.not_valid_after_utc.isoformat()} "
            f"(verification time {at.isoformat()})"
        )
    try:
        critical = [e.oid for e in cert.extensions if e.critical]
    except ValueError as exc:
        raise ChainError(f"{who}: malformed extensions ({exc})") from exc
    for oid in critical:
        if oid not in _PROCESSED_CRITICAL:
            raise ChainError(
                f"{who}: unprocessed critical extension {oid.dotted_string} (RFC 5280 4.2)"
            )


def _check_leaf(cert: x509.Certificate) -> None:
    who = _name(cert)
    if _is_ca(cert):
        raise ChainError(f"{who}: the signing certificate must not be a CA (basicConstraints cA)")
    ku = _extension(cert, x509.KeyUsage)
    # RFC 5280 4.2.1.3: digitalSignature is the bit for verifying signatures on data (here the
    # XMLDSig SignedInfo); a leaf without KeyUsage is unrestricted.
    if ku is not None and isinstance(ku.value, x509.KeyUsage) and not ku.value.digital_signature:
        raise ChainError(f"{who}: keyUsage lacks digitalSignature (RFC 5280 4.2.1.3)")


def _check_issuer(cert: x509.Certificate, intermediates_below: int) -> None:
    """CA rules for a certificate that issued the one before it in the path."""
    who = _name(cert)
    bc = _extension(cert, x509.BasicConstraints)
    # RFC 5280 6.1.4 (k): an issuer must carry basicConstraints with cA = TRUE.
    if bc is None or not isinstance(bc.value, x509.BasicConstraints) or not bc.value.ca:
        raise ChainError(f"{who}: issues a certificate but is not a CA (basicConstraints cA)")
    # RFC 5280 4.2.1.9 / 6.1.4 (l)(m): pathLenConstraint bounds the non-self-issued
    # intermediates below this CA.
    limit = bc.value.path_length
    if limit is not None and intermediates_below > limit:
        raise ChainError(
            f"{who}: pathLenConstraint {limit} exceeded ({intermediates_below} CAs below it)"
        )
    ku = _extension(cert, x509.KeyUsage)
    # RFC 5280 6.1.4 (n): if keyUsage is present, keyCertSign must be set. This, not
    # digitalSignature, is the CA's bit: NVIDIA's root correctly has only keyCertSign|cRLSign.
    if ku is not None and isinstance(ku.value, x509.KeyUsage) and not ku.value.key_cert_sign:
        raise ChainError(f"{who}: keyUsage lacks keyCertSign (RFC 5280 6.1.4 (n))")


def _check_link(child: x509.Certificate, issuer: x509.Certificate) -> None:
    """Name chaining and the issuer's signature on ``child`` (RFC 5280 6.1.3 (a)(1),(4))."""
    who = _name(child)
    if child.issuer != issuer.subject:
        raise ChainError(f"{who}: issuer name does not match subject of {_name(issuer)}")
    try:
        algorithm = child.signature_hash_algorithm
    except UnsupportedAlgorithm as exc:  # an unknown signature OID: nothing we can verify
        raise ChainError(f"{who}: unsupported signature algorithm ({exc})") from None
    if isinstance(algorithm, _WEAK_HASHES):
        raise ChainError(f"{who}: signed with a forbidden hash ({algorithm.name})")
    try:
        child.verify_directly_issued_by(issuer)
    except (InvalidSignature, UnsupportedAlgorithm, ValueError, TypeError) as exc:
        raise ChainError(
            f"{who}: signature does not verify under {_name(issuer)} ({exc!r})"
        ) from exc


def _next_issuer(
    cert: x509.Certificate,
    pool: list[x509.Certificate],
    path: list[x509.Certificate],
    anchor: x509.Certificate,
) -> x509.Certificate:
    if cert.issuer == anchor.subject:
        return anchor
    if cert.issuer == cert.subject:
        raise ChainError(
            f"{_name(cert)}: path ends at a self-signed certificate that is not the trust anchor"
        )
    candidates = [c for c in pool if c.subject == cert.issuer]
    if any(c in path for c in candidates):
        raise ChainError(f"{_name(cert)}: certificate path loops")
    if not candidates:
        issuer = cert.issuer.rfc4514_string()
        raise ChainError(
            f"{_name(cert)}: issuer {issuer} is neither in X509Data nor the trust anchor"
        )
    if len(candidates) > 1:
        raise ChainError(
            f"{_name(cert)}: X509Data holds {len(candidates)} possible issuers (ambiguous)"
        )
    return candidates[0]


def validate_chain(
    certificates: Sequence[x509.Certificate], *, anchor: x509.Certificate, at: datetime
) -> x509.Certificate:
    """Build and check the path leaf -> ... -> anchor; return the validated leaf.

    XMLDSig 1.1 section 4.5.4 (X509Data) implies no ordering, but every certificate must belong to
    the chain of the validation key, so an unrelated extra certificate is an error. The anchor
    may be in ``certificates`` (NVIDIA includes it) or not.

    Args:
        certificates: the certificates from the signature's X509Data, in any order.
        anchor: the configured root certificate.
        at: verification time (timezone-aware).

    Returns:
        The leaf (signing) certificate, after every rule passed.

    Raises:
        ChainError: naming the certificate and the rule that failed.
    """
    if at.tzinfo is None:
        raise ChainError("verification time must be timezone-aware")
    try:
        return _validate(certificates, anchor, at)
    except ChainError:
        raise
    except (UnsupportedAlgorithm, x509.DuplicateExtension, ValueError) as exc:
        # cryptography parses lazily: an unknown key or signature OID, or a duplicated
        # extension, surfaces only when a field is read. Any of them makes the chain invalid.
        raise ChainError(f"malformed certificate in X509Data: {exc}") from None


def _validate(
    certificates: Sequence[x509.Certificate], anchor: x509.Certificate, at: datetime
) -> x509.Certificate:
    pool, leaf = _pool_and_leaf(certificates, anchor)
    path = [leaf]
    while path[-1] is not anchor:
        if len(path) >= MAX_CHAIN_LENGTH:
            raise ChainError(f"certificate path longer than {MAX_CHAIN_LENGTH}")
        path.append(_next_issuer(path[-1], pool, path, anchor))
    unused = [c for c in pool if c not in path]
    if unused:
        raise ChainError(f"{_name(unused[0])}: in X509Data but not on the path to the trust anchor")

    _check_leaf(path[0])
    for i, cert in enumerate(path):
        _check_common(cert, at)
        if i > 0:
            _check_link(path[i - 1], cert)
            _check_issuer(cert, sum(1 for c in path[1:i] if c.issuer != c.subject))
    return path[0]


def _pool_and_leaf(
    certificates: Sequence[x509.Certificate], anchor: x509.Certificate
) -> tuple[list[x509.Certificate], x509.Certificate]:
    """The distinct non-anchor certificates, and the one end-entity certificate among them."""
    pool: list[x509.Certificate] = []
    for cert in certificates:
        if cert not in pool and not is_anchor(cert, anchor):
            pool.append(cert)
    for cert in certificates:
        if cert.subject == anchor.subject and not is_anchor(cert, anchor):
            raise ChainError(
                f"{_name(cert)}: claims the trust anchor's name but is not a certificate of its "
                "key (a different key, or a copy whose signature does not verify)"
            )
    if not pool:
        raise ChainError("X509Data holds no certificate other than the trust anchor")
    if len(pool) >= MAX_CHAIN_LENGTH:
        raise ChainError(f"X509Data holds {len(pool)} certificates (limit {MAX_CHAIN_LENGTH - 1})")
    # The leaf issued nothing in X509Data; if a certificate is missing, the CA left dangling
    # would look like a second leaf, so prefer the one that is not a CA.
    issuers = {c.issuer for c in pool if c.issuer != c.subject}
    leaves = [c for c in pool if c.subject not in issuers]
    if len(leaves) > 1:
        leaves = [c for c in leaves if not _is_ca(c)]
    if len(leaves) != 1:
        names = ", ".join(_name(c) for c in leaves) or "none"
        raise ChainError(f"X509Data must hold exactly one end-entity certificate, found: {names}")
    return pool, leaves[0]
