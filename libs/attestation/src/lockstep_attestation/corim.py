"""Signed CoRIM reference-integrity manifests (draft-ietf-rats-corim): ``18(COSE_Sign1)`` around
``501(corim-map)`` whose ``tags`` hold ``506(<< concise-mid-tag >>)``.

Digest algorithm ids are normalised to COSE ids (-16 SHA-256, -43 SHA-384, -44 SHA-512). Older
CoRIM drafts, and veraison's ``signed-good-corim.cbor``, use the IANA Named Information Hash
Algorithm Registry instead (1 = sha-256, 7 = sha-384, 8 = sha-512); positive ids are never COSE
hash ids, so the two registries cannot be confused.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import cbor2
from cryptography.hazmat.primitives.asymmetric.types import PublicKeyTypes

from lockstep_attestation import cose


class CorimError(ValueError):
    """A signed CoRIM is malformed or does not verify; the message names the field."""


CONTENT_TYPE = "application/rim+cbor"  # draft-ietf-rats-corim section 4.2.1 (protected header 3)
HDR_CORIM_META = 8
TAG_CORIM, TAG_COMID, TAG_OID, TAG_URI = 501, 506, 111, 32
COSE_SHA256, COSE_SHA384, COSE_SHA512 = -16, -43, -44
DIGEST_SIZES: Mapping[int, int] = {COSE_SHA256: 32, COSE_SHA384: 48, COSE_SHA512: 64}
_NAMED_INFO_IDS = {1: COSE_SHA256, 7: COSE_SHA384, 8: COSE_SHA512}
_NAMED_INFO_NAMES = {"sha-256": COSE_SHA256, "sha-384": COSE_SHA384, "sha-512": COSE_SHA512}


@dataclass(frozen=True, slots=True)
class CorimRim:
    """A verified CoRIM: its reference-value digests as ``(COSE hash alg id, digest)``."""

    id: str | None
    profile: str | None
    digests: tuple[tuple[int, bytes], ...]
    kid: bytes | None
    alg: int | None
    signer: str | None
    not_before: datetime | None
    not_after: datetime | None


def seq(item: Any) -> Sequence[Any] | None:
    """``item`` as an array (list or cbor2 6 tuple), else None."""
    ok = isinstance(item, Sequence) and not isinstance(item, bytes | str)
    return item if ok else None


def amap(item: Any) -> Mapping[Any, Any] | None:
    """``item`` as a map (dict or cbor2 6 frozendict), else None."""
    return item if isinstance(item, Mapping) else None


def verify_corim(data: bytes, key: PublicKeyTypes, *, at: datetime | None = None) -> CorimRim:
    """Verify a signed CoRIM and extract its reference-value digests.

    Args:
        data: the ``18(COSE_Sign1)`` bytes.
        key: the CoRIM signer's public key.
        at: when given, the corim-meta signature-validity window must contain it.

    Raises:
        CorimError: naming what is malformed or which check failed.
    """
    try:
        msg = cose.decode(data)
        if msg.kind != "sign1":
            raise CorimError("a signed CoRIM is a COSE_Sign1 (tag 18), got COSE_Sign")
        content_type = msg.protected.get(cose.HDR_CONTENT_TYPE)
        if content_type != CONTENT_TYPE:
            raise CorimError(f"protected content-type {content_type!r} is not {CONTENT_TYPE!r}")
        cose.verify(msg, key)
    except cose.CoseError as exc:
        raise CorimError(f"signed CoRIM: {exc}") from None
    signer, not_before, not_after = _meta(msg.protected.get(HDR_CORIM_META))
    if at is not None and not (
        (not_before is None or not_before <= at) and (not_after is None or at <= not_after)
    ):
        raise CorimError(f"signature validity {not_before} .. {not_after} does not contain {at}")
    corim = corim_map(msg.payload)
    found = tuple(d for comid in comids(corim) for d in reference_digests(comid))
    if not found:
        raise CorimError("no reference-value digest (triples 0, mval 2) in any CoMID")
    return CorimRim(
        corim_id(corim), corim_profile(corim), found, msg.kid, msg.alg, signer, not_before,
        not_after,
    )  # fmt: skip


def _meta(raw: Any) -> tuple[str | None, datetime | None, datetime | None]:
    # corim-meta-map = {0: corim-signer-map {0: name, ? 1: uri}, ? 1: validity-map}
    if raw is None:
        return None, None, None
    if not isinstance(raw, bytes):
        raise CorimError("corim-meta (protected header 8) must be a bstr")
    try:
        meta = amap(cose.cbor_loads(raw, what="corim-meta"))
    except cose.CoseError as exc:
        raise CorimError(str(exc)) from None
    if meta is None:
        raise CorimError("corim-meta is not a map")
    signer = amap(meta.get(0)) or {}
    validity = amap(meta.get(1)) or {}
    bounds = [validity.get(0), validity.get(1)]
    if any(b is not None and not isinstance(b, datetime) for b in bounds):
        raise CorimError(f"corim-meta validity {bounds!r} is not a pair of tag-1 times")
    name = signer.get(0)
    return (name if isinstance(name, str) else None), bounds[0], bounds[1]


def corim_map(payload: bytes) -> Mapping[Any, Any]:
    """Decode the signed payload as ``501(corim-map)``.

    Raises:
        CorimError: not tag 501 around a map.
    """
    try:
        item = cose.cbor_loads(payload, what="CoRIM payload")
    except cose.CoseError as exc:
        raise CorimError(str(exc)) from None
    body = amap(item.value) if isinstance(item, cbor2.CBORTag) and item.tag == TAG_CORIM else None
    if body is None:
        raise CorimError("payload is not a tagged corim-map (tag 501)")
    return body


def comids(corim: Mapping[Any, Any]) -> tuple[Mapping[Any, Any], ...]:
    """Every ``506(<< concise-mid-tag >>)`` in corim ``tags`` (1), decoded; other tags skipped.

    Raises:
        CorimError: tags is not an array or a CoMID does not decode to a map.
    """
    tags = seq(corim.get(1))
    if tags is None:
        raise CorimError("corim-map 'tags' (1) is missing or not an array")
    out = []
    for index, tag in enumerate(tags):
        if not (isinstance(tag, cbor2.CBORTag) and tag.tag == TAG_COMID):
            continue
        if not isinstance(tag.value, bytes):
            raise CorimError(f"CoMID {index} is not a bstr-wrapped concise-mid-tag")
        try:
            body = amap(cose.cbor_loads(tag.value, what=f"CoMID {index}"))
        except cose.CoseError as exc:
            raise CorimError(f"CoMID {index}: {exc}") from None
        if body is None:
            raise CorimError(f"CoMID {index} is not a map")
        out.append(body)
    return tuple(out)


def corim_id(corim: Mapping[Any, Any]) -> str | None:
    """corim-map ``id`` (0): a text id, or a UUID rendered as text."""
    value = corim.get(0)
    return str(value) if isinstance(value, str | UUID) else None


def corim_profile(corim: Mapping[Any, Any]) -> str | None:
    """corim-map ``profile`` (3): ``111(OID)`` as dotted text, or ``32(URI)``.

    Raises:
        CorimError: a profile of another shape, or an OID that does not decode.
    """
    value = corim.get(3)
    if value is None:
        return None
    if isinstance(value, cbor2.CBORTag) and value.tag == TAG_OID and isinstance(value.value, bytes):
        return oid_text(value.value)
    if isinstance(value, cbor2.CBORTag) and value.tag == TAG_URI and isinstance(value.value, str):
        return value.value
    raise CorimError(f"corim profile {value!r} is neither 111(OID) nor 32(URI)")


def oid_text(raw: bytes) -> str:
    """Dotted text of BER OID content bytes (RFC 9090 tag 111).

    The OCP S.A.F.E. tools put the DER tag and length (``06 0A``) inside tag 111 too; that prefix
    is recognised by its length byte and skipped.

    Raises:
        CorimError: truncated or empty OID.
    """
    if len(raw) >= 2 and raw[0] == 0x06 and raw[1] == len(raw) - 2:
        raw = raw[2:]
    arcs, value = [], 0
    for byte in raw:
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            arcs.append(value)
            value = 0
    if not arcs or raw[-1] & 0x80:
        raise CorimError(f"OID bytes {raw.hex()} are empty or truncated")
    top = min(arcs[0] // 40, 2)
    return ".".join(str(a) for a in (top, arcs[0] - 40 * top, *arcs[1:]))


def digest(entry: Any) -> tuple[int, bytes] | None:
    """One CoRIM ``digest = [alg, bytes]`` as ``(COSE alg id, value)``; None for an algorithm
    other than SHA-256/384/512.

    Raises:
        CorimError: not a pair, or a value whose length does not fit its algorithm.
    """
    pair = seq(entry)
    if pair is None or len(pair) != 2:
        raise CorimError(f"digest {entry!r} is not an [alg, value] pair")
    alg, value = pair
    if isinstance(alg, str):
        ident = _NAMED_INFO_NAMES.get(alg.lower())
    elif isinstance(alg, int) and not isinstance(alg, bool):
        ident = alg if alg < 0 else _NAMED_INFO_IDS.get(alg)
    else:
        ident = None
    if ident is None or ident not in DIGEST_SIZES:
        return None
    if not isinstance(value, bytes) or len(value) != DIGEST_SIZES[ident]:
        raise CorimError(f"digest alg {alg!r}: value is not {DIGEST_SIZES[ident]} bytes")
    return ident, value


def digests(value: Any) -> tuple[tuple[int, bytes], ...]:
    """A ``digests-type`` array normalised by :func:`digest` (unknown algorithms dropped).

    Raises:
        CorimError: not an array, or a malformed entry.
    """
    entries = seq(value)
    if entries is None:
        raise CorimError("digests is not an array")
    return tuple(d for d in (digest(e) for e in entries) if d is not None)


def reference_digests(comid: Mapping[Any, Any]) -> tuple[tuple[int, bytes], ...]:
    """Digests (mval key 2) of every measurement in the reference-value triples (triples key 0).

    Raises:
        CorimError: a triple or measurement of the wrong shape.
    """
    triples = amap(comid.get(4)) or {}
    out: list[tuple[int, bytes]] = []
    for triple in seq(triples.get(0)) or ():
        record = seq(triple)
        measurements = seq(record[1]) if record is not None and len(record) == 2 else None
        if measurements is None:
            raise CorimError("reference triple is not [environment, [measurements]]")
        for measurement in measurements:
            mval = amap((amap(measurement) or {}).get(1)) or {}
            if 2 in mval:
                out.extend(digests(mval[2]))
    return tuple(out)


# --- OCP S.A.F.E. SFR profile (OCP-SAFE-CoRIM-Extension-Profile-Specification) ---------------
# The spec names OID 1.3.6.1.4.1.42623.1.1, but its normative CDDL bytes
# h'060A2B0601040182F4170101', which every real report carries, encode 1.3.6.1.4.1.47639.1.1.
OCP_SAFE_PROFILES = frozenset({"1.3.6.1.4.1.42623.1.1", "1.3.6.1.4.1.47639.1.1"})
OCP_SAFE_SFR_KEY = -1  # measurement-values-map extension holding the ocp-safe-sfr-map

SfrHit = tuple[Mapping[Any, Any], Mapping[Any, Any], list[Any]]


def ocp_sfr_endorsements(comid: Mapping[Any, Any]) -> Iterator[SfrHit]:
    """Yield ``(environment class, SFR map, condition digests)`` for each SFR in the
    conditional-endorsement triples (triples key 10), shaped
    ``[[conditions: [[env, [measurement]]]], [endorsements: same shape]]``.

    Raises:
        CorimError: a triple of the wrong shape, or an SFR that is not a map.
    """
    for record in seq((amap(comid.get(4)) or {}).get(10)) or ():
        pair = seq(record)
        if pair is None or len(pair) != 2:
            raise CorimError("conditional-endorsement triple is not [conditions, endorsements]")
        conditions = [m for entry in seq(pair[0]) or () for m in _measurements(entry)]
        cond_digests = [d for _, mval in conditions for d in seq(mval.get(2)) or ()]
        for env, mval in (m for entry in seq(pair[1]) or () for m in _measurements(entry)):
            if OCP_SAFE_SFR_KEY in mval:
                sfr = amap(mval[OCP_SAFE_SFR_KEY])
                if sfr is None:
                    raise CorimError("measurement-values key -1 (SFR) is not a map")
                yield env, sfr, list(cond_digests)


def _measurements(entry: Any) -> Iterator[tuple[Mapping[Any, Any], Mapping[Any, Any]]]:
    pair = seq(entry)
    env = amap(pair[0]) if pair is not None and len(pair) == 2 else None
    claims = seq(pair[1]) if pair is not None and len(pair) == 2 else None
    if env is None or claims is None:
        raise CorimError("triple entry is not [environment-map, [measurement-map]]")
    cls = amap(env.get(0)) or {}  # environment-map class (0): {1 vendor, 2 model}
    for measurement in claims:
        yield cls, amap((amap(measurement) or {}).get(1)) or {}


def manifest_creator(corim: Mapping[Any, Any]) -> str | None:
    """Name of the first corim entity (5) with role manifest-creator (1)."""
    for entity in seq(corim.get(5)) or ():
        ent = amap(entity) or {}
        if 1 in (seq(ent.get(2)) or ()):
            name = ent.get(0)
            return name if isinstance(name, str) else None
    return None
