"""Verifying one bundle end to end: read once, run every check, time each, decide.

This is the application layer shared by the service (``worker.py``) and the CLI (``lockstep
bundle verify``): it wires the reader to the pure checks. A bundle is attested only when every
check passes; there is no check whose failure is "just a warning".
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from lockstep_attestation import checks, jws, safe, signature
from lockstep_attestation.bundle_reader import load_bundle
from lockstep_attestation.evidence import LoadedBundle
from lockstep_attestation.findings import Finding
from lockstep_attestation.policy import Policy
from lockstep_attestation.trust import TrustError, TrustStore
from lockstep_common.bundle import Manifest
from lockstep_common.events.v1 import CheckVerdict
from lockstep_common.vocabulary import CheckResult, clip_text


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome: every check with its result, reason and time."""

    accepted: bool
    checks: tuple[CheckVerdict, ...]
    bundle: LoadedBundle
    read_ms: float

    @property
    def stack_hash(self) -> str | None:
        """The golden stack's hash, when the manifest parsed."""
        return self.bundle.manifest.stack_hash() if self.bundle.manifest else None


def verify_bundle(
    path: Path,
    trust: TrustStore,
    policy: Policy,
    *,
    now: datetime,
    pinned: Manifest | None = None,
    approvals: Sequence[bytes] = (),
) -> Verdict:
    """Read ``path`` once and run every check against it."""
    started = time.perf_counter()
    bundle = load_bundle(path, sha512_needed=lambda m, docs: needs_sha512(m, docs, trust))
    read_ms = (time.perf_counter() - started) * 1000
    return judge(
        bundle, trust, policy, now=now, pinned=pinned, approvals=approvals, read_ms=read_ms
    )


def judge(
    bundle: LoadedBundle,
    trust: TrustStore,
    policy: Policy,
    *,
    now: datetime,
    pinned: Manifest | None = None,
    approvals: Sequence[bytes] = (),
    read_ms: float = 0.0,
) -> Verdict:
    """Run the checks on facts already read."""
    created = bundle.manifest.created_at if bundle.manifest else now
    rim_at = policy.rim_time(now=now, bundle_created_at=created)
    approved = bundle.manifest is not None and any(
        _approval_valid(a, bundle.manifest, trust, now) for a in approvals
    )
    steps: list[Callable[[], list[Finding]]] = [
        lambda: checks.manifest_schema(bundle),
        lambda: signature.manifest_signature(bundle, trust, now),
        lambda: checks.image_inventory(bundle),
        lambda: checks.image_digests(bundle),
        lambda: checks.pldm_packages(bundle),
        lambda: checks.in_band_packages(bundle),
        lambda: checks.rims(bundle, trust, policy, rim_at),
        lambda: checks.safe_reports(bundle, trust, policy),
        lambda: checks.sbom(bundle),
        lambda: checks.anti_rollback(bundle, pinned, approved),
    ]
    results: list[CheckVerdict] = []
    for step in steps:
        t0 = time.perf_counter()
        findings = step()
        each = (time.perf_counter() - t0) * 1000 / max(len(findings), 1)
        results += [
            CheckVerdict(
                check=f.check,
                result=CheckResult.PASS if f.passed else CheckResult.FAIL,
                reason=clip_text(f.reason),
                duration_ms=round(each, 3),
            )
            for f in findings
        ]
    accepted = bool(results) and all(r.result is CheckResult.PASS for r in results)
    return Verdict(accepted, tuple(results), bundle, read_ms)


def needs_sha512(manifest: Manifest, documents: dict[str, bytes], trust: TrustStore) -> set[str]:
    """Images whose every S.A.F.E. report lacks a usable SHA-384 (so SHA-512 must be computed)."""
    out = set()
    for comps in manifest.profiles.values():
        for entry in comps.values():
            reports = []
            for path in entry.safe:
                try:
                    reports.append(safe.verify_sfr(documents.get(path, b""), trust.srp_keys))
                except (safe.SfrError, ValueError):
                    continue
            if reports and all(r.fw_sha384 is None for r in reports):
                out.add(entry.image)
    return out


def _approval_valid(token: bytes, manifest: Manifest, trust: TrustStore, now: datetime) -> bool:
    """A rollback approval: a JWS by a trusted key naming exactly this bundle."""
    try:
        parsed = jws.parse_compact(token.strip())
        key = trust.key_for(parsed.kid, now)
        jws.verify(parsed, key.key, allowed=signature.MANIFEST_ALGORITHMS)
        claim = json.loads(parsed.payload)
    except (jws.JwsError, TrustError, ValueError):
        return False
    return bool(
        isinstance(claim, dict)
        and claim.get("bundle_id") == manifest.bundle_id
        and claim.get("bundle_version") == manifest.bundle_version
        and claim.get("approved_by")
    )
