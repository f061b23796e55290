"""OCP S.A.F.E. short-form reports (SFR): check the review provider's signature, then read claims.

Wire forms (OCP-Security-SAFE ``shortform_report`` README; CoRIM profile 1.3.6.1.4.1.42623.1.1):

- a compact JWS (RFC 7515) over the JSON report; every published report is ES512 on P-521;
- ``18(COSE_Sign1)`` (the reference library) or ``98(COSE_Sign)`` with no alg header (the
  Tetrel-signed Microsoft HSM reports) around ``501(corim-map)``, whose CoMID carries the SFR in
  measurement-values key -1 of a conditional-endorsement triple.

Only signed bytes are read: a ``.json`` twin is not a report, and where twin and JWS differ the JWS
is what counts. Every byte of an accepted report is either covered by the signature or is an
unauthenticated COSE ``kid`` that must name the very key that verified.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import PurePosixPath
from types import MappingProxyType
from typing import Any, Literal

from cryptography.hazmat.primitives.asymmetric.types import PublicKeyTypes

from lockstep_attestation import corim, cose, jws
from lockstep_attestation.corim import amap, seq


class SfrError(ValueError):
    """A report is not signed, does not verify, or is malformed; the message names what."""


# OCP S.A.F.E. SFR signing: PS384, PS512, ES384, ES512; RSA keys 3072 bits or more.
SFR_JWS_ALGORITHMS = frozenset({"ES384", "ES512", "PS384", "PS512"})
SFR_COSE_ALGORITHMS = frozenset({-35, -36, -38, -39})
SFR_MIN_RSA_BITS = 3072
# kid -> key file below OCP-Security-SAFE SRP_certificates/Active/ (no mapping file is published).
KNOWN_SRP_KIDS: Mapping[str, str] = MappingProxyType({
    "NCC Group": "NCC_Group/ocp_safe_ncc_group_ecdsa_p521.pub",
    "tetrel-ocp-sfr-signing-key": "Tetrel_Security/tetrel-ocp-sfr-signing-key.pub",
    "Keysight": "Keysight/keysight_ocp_safe_ecdsa_p521_e1.pub",
    "IOActive - secp521r1": "IOActive/ioactive-ocp-safe-ecdsa-p521-pub.pem",
    "atredis_ocp_safe_ecdsa_p521": "Atredis/atredis_ocp_safe_ecdsa_p521.pub",
    "OCP_SAFE_SFR_KEYS_SGS_BRS_2026": "SGS_Brightsight/OCP_SAFE_SFR_KEYS_SGS_BRS_2026_public.pem",
})  # fmt: skip
_COMPACT = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*")
_HEX = re.compile(r"[0-9a-f]*")


@dataclass(frozen=True)
class SfrIssue:
    """One unfixed issue; ``cvss_score`` is None when absent, unparseable or out of 0..10."""

    title: str
    cvss_score: float | None
    cvss_vector: str | None
    cwe: str | None
    cve: str | None


@dataclass(frozen=True)
class SfrReport:
    """The claims of a verified report; hashes are lower-case hex or None when unusable."""

    form: Literal["jws", "corim"]
    kid: str | None
    key_name: str
    vendor: str | None
    product: str | None
    fw_version: str | None
    fw_sha384: str | None
    fw_sha512: str | None
    issues: tuple[SfrIssue, ...]
    srp: str | None
    completion_date: str | None
    scope_number: str | None
    framework_version: str | None


@dataclass(frozen=True, eq=False)
class SrpKeySet:
    """Review-provider public keys by name (path relative to the key directory; reading the
    directory is ``adapters.key_files.load_srp_keys``)."""

    keys: Mapping[str, PublicKeyTypes]
    kid_table: Mapping[str, str] = field(default_factory=lambda: KNOWN_SRP_KIDS)
    source: str = ""

    def candidates(
        self, kid: str | None, *, authenticated: bool, fits: Callable[[PublicKeyTypes], bool]
    ) -> list[tuple[str, PublicKeyTypes]]:
        """Keys to try: the one a known kid names (table, then file stem); otherwise every key
        that ``fits`` the algorithm, but only if the kid is absent or signed, so an
        unauthenticated kid can never be rewritten to an unknown value.

        Raises:
            SfrError: no key loaded, an unauthenticated unknown kid, or no key of a fitting type.
        """
        if not self.keys:
            raise SfrError(f"no SRP public keys are loaded (from {self.source or 'nowhere'})")
        if kid is not None:
            stems = [n for n in self.keys if PurePosixPath(n).stem == kid]
            named = [self.kid_table.get(kid), stems[0] if len(stems) == 1 else None]
            for name in (n for n in named if n is not None and n in self.keys):
                return [(name, self.keys[name])]
            if not authenticated:
                raise SfrError(f"unauthenticated kid {kid!r} names no loaded SRP key")
        found = [(name, key) for name, key in sorted(self.keys.items()) if fits(key)]
        if not found:
            raise SfrError(f"kid {kid!r} is unknown and no loaded SRP key fits its algorithm")
        return found


def verify_sfr(data: bytes, keys: SrpKeySet) -> SfrReport:
    """Verify a signed SFR (compact JWS, or COSE around a CoRIM) and return its claims.

    Raises:
        SfrError: naming the form, kid, alg, key or field that failed.
    """
    stripped = data.strip(b" \t\r\n")
    if stripped.startswith(b"{"):
        raise SfrError("report is unsigned JSON; only the .jws or signed .cbor form is accepted")
    try:
        text = stripped.decode("ascii")
    except UnicodeDecodeError:
        text = ""
    if _COMPACT.fullmatch(text):
        return _verify_jws(text, keys)
    return _verify_cose(data, keys)


def _verify_jws(text: str, keys: SrpKeySet) -> SfrReport:
    try:
        token = jws.parse_compact(text)
    except jws.JwsError as exc:
        raise SfrError(f"SFR JWS: {exc}") from None
    alg, kid = token.alg, token.kid
    if alg not in SFR_JWS_ALGORITHMS:
        raise SfrError(f"SFR JWS kid {kid!r}: alg {alg!r} not allowed {sorted(SFR_JWS_ALGORITHMS)}")

    def fits(key: PublicKeyTypes) -> bool:
        return _fits(alg, key)

    def check(key: PublicKeyTypes) -> None:
        jws.verify(token, key, allowed=SFR_JWS_ALGORITHMS, min_rsa_bits=SFR_MIN_RSA_BITS)

    name = _first_verifying(keys.candidates(kid, authenticated=True, fits=fits), check, kid)
    return _from_json(token.payload, kid=kid, key_name=name)


def _verify_cose(data: bytes, keys: SrpKeySet) -> SfrReport:
    try:
        msg = cose.decode(data)
    except cose.CoseError as exc:
        raise SfrError(f"report is neither a compact JWS nor COSE-signed CoRIM: {exc}") from None
    buckets = [("message", msg.unprotected)]
    buckets += [(f"signer {i}", s.unprotected) for i, s in enumerate(msg.signers)]
    for where, bucket in buckets:  # nothing but the kid may sit outside the signature
        if set(bucket) - {cose.HDR_KID}:
            raise SfrError(f"SFR COSE {where} has unprotected labels {sorted(bucket)}; only kid")
    errors = []
    for signer in msg.signers:
        kid = None if signer.kid is None else _kid_text(signer.kid)

        def fits(key: PublicKeyTypes, named: int | None = signer.alg) -> bool:
            # RFC 9052 leaves no alg only to the COSE_Sign quirk; infer it from the key there.
            alg = named if named is not None or msg.kind == "sign1" else cose.infer_alg(key)
            return (
                alg is not None and alg in SFR_COSE_ALGORITHMS and _fits(cose.ALGORITHMS[alg], key)
            )

        def check(key: PublicKeyTypes, kid_bytes: bytes | None = signer.kid) -> None:
            cose.verify(msg, key, kid=kid_bytes, allowed=SFR_COSE_ALGORITHMS,
                        min_rsa_bits=SFR_MIN_RSA_BITS)  # fmt: skip

        authenticated = cose.HDR_KID in signer.protected
        try:
            cands = keys.candidates(kid, authenticated=authenticated, fits=fits)
            name = _first_verifying(cands, check, kid)
        except SfrError as exc:
            errors.append(str(exc))
            continue
        return _from_corim(msg.payload, kid=kid, key_name=name)
    raise SfrError("; ".join(errors))


def _kid_text(kid: bytes) -> str:
    try:
        return kid.decode("utf-8")
    except UnicodeDecodeError:
        return f"0x{kid.hex()}"


def _fits(alg: str, key: PublicKeyTypes) -> bool:
    try:
        jws.check_key(alg, key, min_rsa_bits=SFR_MIN_RSA_BITS)
    except jws.JwsError:
        return False
    return True


def _first_verifying(
    cands: list[tuple[str, PublicKeyTypes]], check: Callable[[PublicKeyTypes], None], kid: Any
) -> str:
    errors = []
    for name, key in cands:
        try:
            check(key)
        except (jws.JwsError, cose.CoseError) as exc:
            errors.append(f"{name}: {exc}")
            continue
        return name
    raise SfrError(f"SFR signature (kid {kid!r}) verifies with no SRP key: {'; '.join(errors)}")


def _from_json(payload: bytes, *, kid: str | None, key_name: str) -> SfrReport:
    try:
        doc = jws.loads_json(payload)
    except ValueError as exc:
        raise SfrError(f"SFR payload is not JSON: {exc}") from None
    device, audit = (doc.get(k) if isinstance(doc, dict) else None for k in ("device", "audit"))
    if not isinstance(device, dict) or not isinstance(audit, dict):
        raise SfrError("SFR payload lacks the 'device' and 'audit' objects")
    issues = audit.get("issues")
    if not isinstance(issues, list) or not all(isinstance(i, dict) for i in issues):
        raise SfrError("SFR audit.issues is missing or not a list of objects")
    # quirk: scope_number is an int, float, str or missing; some reports use audit.scope
    scope = audit["scope_number"] if "scope_number" in audit else audit.get("scope")
    return SfrReport(
        form="jws", kid=kid, key_name=key_name,
        vendor=_text(device.get("vendor")), product=_text(device.get("product")),
        fw_version=_text(device.get("fw_version")),
        fw_sha384=normalize_hex(device.get("fw_hash_sha2_384"), 96),
        fw_sha512=normalize_hex(device.get("fw_hash_sha2_512"), 128),
        issues=tuple(
            SfrIssue(_text(i.get("title")) or "", parse_score(i.get("cvss_score")),
                     _text(i.get("cvss_vector")), _text(i.get("cwe")), _text(i.get("cve")))
            for i in issues
        ),
        srp=_text(audit.get("srp")), completion_date=_text(audit.get("completion_date")),
        scope_number=_scalar(scope), framework_version=_scalar(doc.get("review_framework_version")),
    )  # fmt: skip


def _from_corim(payload: bytes, *, kid: str | None, key_name: str) -> SfrReport:
    try:
        top = corim.corim_map(payload)
        profile = corim.corim_profile(top)
        if profile not in corim.OCP_SAFE_PROFILES:
            raise SfrError(f"CoRIM profile {profile!r} is not the OCP S.A.F.E. SFR profile")
        found = [hit for comid in corim.comids(top) for hit in corim.ocp_sfr_endorsements(comid)]
    except corim.CorimError as exc:
        raise SfrError(f"SFR CoRIM: {exc}") from None
    if len(found) != 1:
        raise SfrError(f"SFR CoRIM must carry exactly one SFR (mval -1), found {len(found)}")
    env, sfr, raw_digests = found[0]
    fw_ids = [f for f in seq(sfr.get(4)) or () if isinstance(f, Mapping)]
    raw_digests += [d for f in fw_ids for d in seq(f.get(1)) or ()]
    issues = seq(sfr.get(5)) if 5 in sfr else ()
    if issues is None or not all(isinstance(i, Mapping) for i in issues):
        raise SfrError("SFR CoRIM issues (5) is not an array of maps")
    version = next((v.get(0) for f in fw_ids if (v := amap(f.get(0))) is not None), None)
    return SfrReport(
        form="corim", kid=kid, key_name=key_name,
        vendor=_text(env.get(1)), product=_text(env.get(2)), fw_version=_text(version),
        fw_sha384=_one_digest(raw_digests, corim.COSE_SHA384),
        fw_sha512=_one_digest(raw_digests, corim.COSE_SHA512),
        issues=tuple(_corim_issue(i) for i in issues), srp=corim.manifest_creator(top),
        completion_date=_date(sfr.get(2)), scope_number=_scalar(sfr.get(3)),
        framework_version=_scalar(sfr.get(0)),
    )  # fmt: skip


def _one_digest(raw: list[Any], alg: int) -> str | None:
    values = set()
    for entry in raw:
        try:
            found = corim.digest(entry)
        except corim.CorimError:
            continue  # a malformed digest is tolerated but never counts as a match
        if found is not None and found[0] == alg:
            values.add(found[1].hex())
    if len(values) > 1:
        raise SfrError(f"SFR CoRIM carries {len(values)} different digests for alg {alg}")
    return values.pop() if values else None


def _corim_issue(issue: Mapping[Any, Any]) -> SfrIssue:
    # issue-entry {0 title, 1 description, 2 assessment, 3 cwe, 4 cve}; only an assessment with
    # both cvss-score (0) and cvss-vector (1) as text is CVSS (JIL/qualitative have no score).
    assessment = amap(issue.get(2)) or {}
    cvss = isinstance(assessment.get(0), str) and isinstance(assessment.get(1), str)
    return SfrIssue(
        _text(issue.get(0)) or "",
        parse_score(assessment.get(0)) if cvss else None,
        _text(assessment.get(1)) if cvss else None,
        _text(issue.get(3)),
        _text(issue.get(4)),
    )


def _date(value: Any) -> str | None:
    if isinstance(value, datetime):
        return value.astimezone(UTC).date().isoformat()
    return _text(value)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _scalar(value: Any) -> str | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, int | float):
        return str(value)
    return value.strip() or None if isinstance(value, str) else None


def normalize_hex(value: Any, length: int) -> str | None:
    """Lower-case hex of exactly ``length`` digits, or None (empty, malformed, wrong length).
    A leading ``0x`` is dropped: the OCP README example and helloworld sample carry one."""
    if not isinstance(value, str):
        return None
    text = value.strip().lower()
    text = text.removeprefix("0x")
    return text if len(text) == length and _HEX.fullmatch(text) else None


def parse_score(value: Any) -> float | None:
    """A CVSS score from text or number; None when absent, unparseable, or outside 0..10."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    try:
        score = float(value)
    except ValueError:
        return None
    return score if math.isfinite(score) and 0.0 <= score <= 10.0 else None


def image_matches(report: SfrReport, *, sha384: str, sha512: str | None = None) -> bool:
    """True when at least one usable report hash equals the image's and none differs.

    Raises:
        ValueError: the image hash given is not 96 (or 128) hex digits.
    """
    image = {384: normalize_hex(sha384, 96), 512: normalize_hex(sha512, 128) if sha512 else None}
    if image[384] is None or (sha512 and image[512] is None):
        raise ValueError("image sha384/sha512 must be 96/128 hex digits")
    pairs = [(report.fw_sha384, image[384]), (report.fw_sha512, image[512])]
    compared = [ours == theirs for ours, theirs in pairs if ours is not None and theirs is not None]
    return bool(compared) and all(compared)


def blocking_issues(report: SfrReport, cvss_ceiling: float) -> tuple[SfrIssue, ...]:
    """Issues scored at or above ``cvss_ceiling``; a missing or unparseable score blocks.

    Raises:
        ValueError: the ceiling is not a finite number.
    """
    if not math.isfinite(cvss_ceiling):
        raise ValueError(f"cvss_ceiling {cvss_ceiling!r} is not finite")
    return tuple(i for i in report.issues if i.cvss_score is None or i.cvss_score >= cvss_ceiling)
