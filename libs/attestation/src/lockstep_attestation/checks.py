"""The attestation checks. Each returns findings; a bundle is attested only if all pass.

Every check names what it looked at (profile/component, file) in its reason, passing or not,
so that a verdict is an audit record rather than a yes/no.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from datetime import datetime

from lockstep_attestation import corim, safe, swid
from lockstep_attestation.evidence import ImageFacts, LoadedBundle
from lockstep_attestation.findings import Finding
from lockstep_attestation.policy import Policy
from lockstep_attestation.trust import TrustStore
from lockstep_common.bundle import Banks, ComponentEntry, ImageFormat, Manifest
from lockstep_common.versions import older
from lockstep_common.vocabulary import Component

COSE_SHA384 = -43
IN_BAND_PARTS = frozenset(
    {Component.GPU_GSP, Component.CUDA, Component.NCCL, Component.FABRIC_MANAGER}
)
"""What ships inside the driver package and is installed with it by the node agent (seed 004:
"GSP firmware ships inside the driver package"); the updater has no other way to install it."""
SAME_AS_DRIVER = frozenset({Component.GPU_GSP, Component.FABRIC_MANAGER})
"""Versioned as the driver itself (compatibility rules gsp_equals_driver,
fabric_manager_equals_driver)."""


def _entries(m: Manifest) -> Iterator[tuple[str, ComponentEntry]]:
    for profile, comps in m.profiles.items():
        for comp, entry in comps.items():
            yield f"{profile}/{comp.value}", entry


def manifest_schema(b: LoadedBundle) -> list[Finding]:
    """manifest.json parses and matches the lockstep.bundle/v1 schema."""
    if b.manifest is None:
        return [Finding("manifest", False, f"manifest.json is invalid: {b.manifest_error}")]
    m = b.manifest
    return [
        Finding("manifest", True, f"{m.bundle_id} {m.bundle_version}, {len(m.profiles)} profile(s)")
    ]


def image_inventory(b: LoadedBundle) -> list[Finding]:
    """Every entry has its image and every file is named by the manifest."""
    out = [
        Finding("inventory", False, f"{path} is named by the manifest but absent")
        for path in b.missing
    ]
    out += [
        Finding("inventory", False, f"{path} is not named by the manifest") for path in b.unlisted
    ]
    out += [Finding("inventory", False, f"{path}: {err}") for path, err in b.read_errors.items()]
    return out or [
        Finding("inventory", True, f"{len(b.images)} image(s), nothing missing or extra")
    ]


def image_digests(b: LoadedBundle) -> list[Finding]:
    """Each image's SHA-384 and size equal the manifest's."""
    if b.manifest is None:
        return []
    out = []
    for path, (sha384, size) in sorted(b.manifest.images().items()):
        facts = b.images.get(path)
        if facts is None:
            continue  # reported by image_inventory
        if facts.sha384 != sha384:
            out.append(
                Finding("digest", False, f"{path}: sha384 {facts.sha384} != manifest {sha384}")
            )
        elif facts.size != size:
            out.append(Finding("digest", False, f"{path}: {facts.size} bytes != manifest {size}"))
        else:
            out.append(Finding("digest", True, f"{path}: sha384 matches"))
    return out


def pldm_packages(b: LoadedBundle) -> list[Finding]:
    """PLDM images: checksums valid, a device record matches the target, versions match."""
    if b.manifest is None:
        return []
    out = []
    for name, entry in _entries(b.manifest):
        facts = b.images.get(entry.image)
        if entry.format is not ImageFormat.PLDM or facts is None:
            continue
        out.append(Finding("pldm", *_pldm_verdict(name, entry, facts)))
    return out


def _pldm_verdict(name: str, entry: ComponentEntry, facts: ImageFacts) -> tuple[bool, str]:
    pkg = facts.pldm
    if pkg is None:
        return False, f"{name}: {entry.image} is not a valid PLDM package: {facts.pldm_error}"
    if not entry.device:
        return False, f"{name}: the manifest names no device descriptors to match {entry.image}"
    device = [(d.type, bytes.fromhex(d.value_hex)) for d in entry.device]
    records = pkg.matching_records(device)
    if not records:
        return False, f"{name}: no device record in {entry.image} matches the target descriptors"
    for record in records:
        versions = {c.version.text for c in pkg.components_for(record)}
        if record.component_image_set_version.text == entry.version or versions == {entry.version}:
            return True, f"{name}: record {record.index} matches; version {entry.version}"
    found = sorted({r.component_image_set_version.text for r in records})
    return False, f"{name}: package version(s) {found} != manifest {entry.version}"


def in_band_packages(b: LoadedBundle) -> list[Finding]:
    """A driver package and what ships inside it are installed in band, as one unit, from one
    image: every in-band entry is the driver or one of its parts, ``one_way`` (a driver change is
    undone by installing the previous package, not by a bank flip), and each part names the
    driver's image (a separate image would never be installed) at the version the package
    brings. Bundles without in-band components have no finding here."""
    if b.manifest is None:
        return []
    out = []
    for profile, comps in sorted(b.manifest.profiles.items()):
        in_band = {c: e for c, e in comps.items() if _is_in_band(c, e)}
        driver = in_band.get(Component.DRIVER)
        for comp, entry in sorted(in_band.items()):
            passed, why = _in_band_verdict(comp, entry, driver)
            out.append(Finding("in_band", passed, f"{profile}/{comp.value}: {why}"))
    return out


def _is_in_band(comp: Component, entry: ComponentEntry) -> bool:
    return entry.activation == "in_band" or comp is Component.DRIVER or comp in IN_BAND_PARTS


def _in_band_verdict(
    comp: Component, entry: ComponentEntry, driver: ComponentEntry | None
) -> tuple[bool, str]:
    if comp is not Component.DRIVER and comp not in IN_BAND_PARTS:
        return False, "activation in_band, but only a driver package and its parts install in band"
    if entry.activation != "in_band" or entry.banks is not Banks.ONE_WAY:
        return False, (
            f"banks {entry.banks.value}, activation {entry.activation}; an in-band package is "
            "one_way, activation in_band (installed by the node agent; no bank to flip back to)"
        )
    if comp is Component.DRIVER:
        return True, f"{entry.version} from {entry.image}, installed in band as one unit"
    return _part_verdict(comp, entry, driver)


def _part_verdict(
    comp: Component, entry: ComponentEntry, driver: ComponentEntry | None
) -> tuple[bool, str]:
    """A part of the driver package: its image, and for GSP / fabric manager its version."""
    if driver is None:
        return False, "ships inside the driver package, and the profile names no driver"
    if entry.image != driver.image:
        return False, f"{entry.image} is not the driver's package {driver.image}"
    if comp in SAME_AS_DRIVER and entry.version != driver.version:
        return False, f"{entry.version} != driver {driver.version} (shipped in its package)"
    return True, f"{entry.version}, inside the driver package {driver.image}"


def rims(b: LoadedBundle, trust: TrustStore, policy: Policy, at: datetime) -> list[Finding]:
    """Each RIM is authentic (chain to a configured root at ``at``) and measures the image."""
    if b.manifest is None:
        return []
    out = []
    for name, entry in _entries(b.manifest):
        if entry.rim is None:
            if any(name.endswith(f"/{c.value}") for c in policy.require_rim):
                out.append(
                    Finding("rim", False, f"{name}: policy requires a RIM and none is given")
                )
            continue
        out.append(Finding("rim", *_rim_verdict(name, entry, b, trust, at)))
    return out


def _rim_verdict(
    name: str, entry: ComponentEntry, b: LoadedBundle, trust: TrustStore, at: datetime
) -> tuple[bool, str]:
    assert entry.rim is not None  # noqa: S101 - the caller checked
    data = b.documents.get(entry.rim)
    if data is None:
        return False, f"{name}: {entry.rim} is missing"
    if entry.rim.endswith(".cbor"):
        return _corim_verdict(name, entry, data, trust, at)
    errors = []
    for anchor in trust.rim_anchors:
        try:
            rim = swid.verify_swid_rim(data, trust_anchor=anchor, at=at)
        except (swid.RimError, ValueError) as exc:
            errors.append(str(exc))
            continue
        if not swid.rim_matches(rim, entry.sha384):
            return False, f"{name}: {entry.rim} verifies but no measurement equals the image"
        return True, f"{name}: {entry.rim} signed by {rim.leaf_subject}; measurement matches"
    return False, f"{name}: {entry.rim}: {'; '.join(errors) or 'no RIM trust anchor configured'}"


def _corim_verdict(
    name: str, entry: ComponentEntry, data: bytes, trust: TrustStore, at: datetime
) -> tuple[bool, str]:
    errors = []
    for kid, key in sorted(trust.corim_keys.items()):
        try:
            rim = corim.verify_corim(data, key, at=at)
        except (corim.CorimError, ValueError) as exc:
            errors.append(f"{kid}: {exc}")
            continue
        if (COSE_SHA384, bytes.fromhex(entry.sha384)) not in rim.digests:
            return False, f"{name}: {entry.rim} verifies ({kid}) but no sha384 equals the image"
        return True, f"{name}: {entry.rim} signed by {kid}; measurement matches"
    return False, f"{name}: {entry.rim}: {'; '.join(errors) or 'no CoRIM key configured'}"


def safe_reports(b: LoadedBundle, trust: TrustStore, policy: Policy) -> list[Finding]:
    """Each S.A.F.E. report is signed by a review provider, covers the image, and has no open
    issue at or above the policy's CVSS ceiling."""
    if b.manifest is None:
        return []
    out = []
    for name, entry in _entries(b.manifest):
        if not entry.safe and any(name.endswith(f"/{c.value}") for c in policy.require_safe):
            out.append(Finding("safe", False, f"{name}: policy requires a S.A.F.E. report"))
        out.extend(
            Finding("safe", *_safe_verdict(name, entry, path, b, trust, policy))
            for path in entry.safe
        )
    return out


def _safe_verdict(
    name: str, entry: ComponentEntry, path: str, b: LoadedBundle, trust: TrustStore, policy: Policy
) -> tuple[bool, str]:
    data = b.documents.get(path)
    if data is None:
        return False, f"{name}: {path} is missing"
    try:
        report = safe.verify_sfr(data, trust.srp_keys)
    except (safe.SfrError, ValueError) as exc:
        return False, f"{name}: {path}: {exc}"
    facts = b.images.get(entry.image)
    sha512 = facts.sha512 if facts else None
    if not safe.image_matches(report, sha384=entry.sha384, sha512=sha512):
        return False, f"{name}: {path} (by {report.srp}) does not cover this image's hash"
    blocking = safe.blocking_issues(report, policy.cvss_ceiling)
    if blocking:
        titles = "; ".join(f"{i.title} (CVSS {i.cvss_score})" for i in blocking)
        return False, f"{name}: {path}: open issues at or above {policy.cvss_ceiling}: {titles}"
    return True, f"{name}: {path} signed by {report.key_name}; covers the image; no blocking issue"


def sbom(b: LoadedBundle) -> list[Finding]:
    """sbom.cdx.json is present and a parseable CycloneDX document."""
    data = b.documents.get("sbom.cdx.json")
    if data is None:
        return [Finding("sbom", False, "sbom.cdx.json is missing")]
    try:
        doc = json.loads(data)
    except ValueError as exc:
        return [Finding("sbom", False, f"sbom.cdx.json is not JSON: {exc}")]
    if not isinstance(doc, dict) or doc.get("bomFormat") != "CycloneDX" or "specVersion" not in doc:
        return [Finding("sbom", False, "sbom.cdx.json is not CycloneDX (bomFormat/specVersion)")]
    if b.manifest is not None and _sha384(data) != b.manifest.sbom_sha384:
        return [Finding("sbom", False, "sbom.cdx.json differs from the SHA-384 the manifest binds")]
    count = len(doc.get("components") or [])
    return [Finding("sbom", True, f"CycloneDX {doc['specVersion']}, {count} component(s)")]


def _sha384(data: bytes) -> str:
    return hashlib.sha384(data).hexdigest()


def anti_rollback(b: LoadedBundle, pinned: Manifest | None, approved: bool) -> list[Finding]:
    """No component below its floor; no bundle older than the pinned one unless approved."""
    if b.manifest is None:
        return []
    m, out = b.manifest, []
    for name, e in _entries(m):
        lowest = e.lowest_supported_version
        below = None if not lowest else older(e.version, lowest)
        if below:
            out.append(
                Finding(
                    "rollback", False, f"{name}: {e.version} is below the lowest supported {lowest}"
                )
            )
        elif lowest and below is None:  # no guessing which is newer (lockstep_common.versions)
            out.append(
                Finding(
                    "rollback",
                    False,
                    f"{name}: {e.version} cannot be ordered against the lowest supported {lowest}",
                )
            )
    if pinned is not None and not approved:
        out += _against_pinned(m, pinned)
    return out or [
        Finding(
            "rollback",
            True,
            "no component below its floor or the pinned bundle"
            + (" (rollback approved)" if approved and pinned else ""),
        )
    ]


def _against_pinned(m: Manifest, pinned: Manifest) -> list[Finding]:
    out = []
    if m.created_at < pinned.created_at:
        out.append(
            Finding(
                "rollback",
                False,
                f"bundle built {m.created_at.isoformat()} is older "
                f"than the pinned {pinned.bundle_id} {pinned.bundle_version}",
            )
        )
    for profile, comps in m.profiles.items():
        for comp, e in comps.items():
            old = pinned.profiles.get(profile, {}).get(comp)
            if (
                old
                and old.security_version is not None
                and (e.security_version or 0) < old.security_version
            ):
                out.append(
                    Finding(
                        "rollback",
                        False,
                        f"{profile}/{comp.value}: security version "
                        f"{e.security_version} < pinned {old.security_version}",
                    )
                )
    return out
