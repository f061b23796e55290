"""A whole bundle through every check: the valid kit attests; any tampering, missing evidence
or untrusted key is rejected with a reason that names it."""

from __future__ import annotations

import hashlib
import json
import shutil
import tarfile
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from lockstep_attest.testing.bundles import KID, Kit, make_kit, sfr_payload
from lockstep_attestation import jws
from lockstep_attestation.builder import build_bundle
from lockstep_attestation.bundle_reader import BundleReadError
from lockstep_attestation.policy import Policy
from lockstep_attestation.trust_store import load_trust_store
from lockstep_attestation.verification import Verdict, verify_bundle
from lockstep_common.bundle import Manifest

pytestmark = pytest.mark.unit
NOW = datetime.now(UTC)


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory) -> Kit:
    return make_kit(tmp_path_factory.mktemp("kit"), now=NOW)


@pytest.fixture
def copy(kit: Kit, tmp_path: Path) -> Iterator[Path]:
    target = tmp_path / "bundle"
    shutil.copytree(kit.bundle, target)
    yield target


def verify(
    kit: Kit,
    bundle: Path,
    policy: Policy | None = None,
    *,
    pinned: Manifest | None = None,
    approvals: Sequence[bytes] = (),
) -> Verdict:
    trust = load_trust_store(kit.trust)
    return verify_bundle(
        bundle, trust, policy or Policy(), now=NOW, pinned=pinned, approvals=approvals
    )


def failures(v: Verdict) -> list[str]:
    return [f"{c.check}: {c.reason}" for c in v.checks if c.result.value == "fail"]


def test_the_kit_is_attested_with_every_check_listed(kit: Kit) -> None:
    verdict = verify(kit, kit.bundle)
    assert verdict.accepted, failures(verdict)
    assert {c.check for c in verdict.checks} == {
        "manifest",
        "signature",
        "inventory",
        "digest",
        "pldm",
        "rim",
        "safe",
        "sbom",
        "rollback",
    }
    assert verdict.stack_hash == kit.manifest.stack_hash()


def test_a_tar_of_the_bundle_verifies_the_same(kit: Kit, tmp_path: Path) -> None:
    archive = tmp_path / "bundle.tar"
    with tarfile.open(archive, "w") as tar:
        for path in sorted(kit.bundle.rglob("*")):
            tar.add(path, arcname=path.relative_to(kit.bundle).as_posix(), recursive=False)
    assert verify(kit, archive).accepted


def test_a_tar_with_a_path_outside_the_bundle_is_refused(kit: Kit, tmp_path: Path) -> None:
    archive = tmp_path / "evil.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(kit.bundle / "manifest.json", arcname="../escape.json")
    with pytest.raises(BundleReadError, match="unsafe tar member"):
        verify(kit, archive)


def _same_json(a: bytes, b: bytes) -> bool:
    try:
        return bool(json.loads(a) == json.loads(b))
    except ValueError:
        return False


def _files(bundle: Path) -> list[str]:
    return sorted(p.relative_to(bundle).as_posix() for p in bundle.rglob("*") if p.is_file())


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_flipping_any_byte_of_any_file_never_yields_an_attested_bundle(
    kit: Kit, tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    bundle = tmp_path_factory.mktemp("flip") / "bundle"
    shutil.copytree(kit.bundle, bundle)
    name = data.draw(st.sampled_from(_files(bundle)), label="file")
    raw = bytearray((bundle / name).read_bytes())
    offset = data.draw(st.integers(0, len(raw) - 1), label="offset")
    original = bytes(raw)
    raw[offset] ^= data.draw(st.integers(1, 255), label="mask")
    # The manifest is signed in canonical form (RFC 8785): a flip that turns JSON whitespace
    # into other whitespace changes no signed byte, so it is not a change of the bundle. Nor is
    # whitespace around the compact JWS (RFC 7515 7.1 has none; the reader strips it).
    assume(not (name == "manifest.json" and _same_json(original, bytes(raw))))
    assume(not (name == "manifest.jws" and original.strip() == bytes(raw).strip()))
    (bundle / name).write_bytes(bytes(raw))
    verdict = verify(kit, bundle)
    assert not verdict.accepted, f"{name}@{offset} changed yet attested"


def test_an_unlisted_file_and_a_missing_image_are_both_named(kit: Kit, copy: Path) -> None:
    (copy / "images" / "extra.bin").write_bytes(b"surprise")
    (copy / "images" / "psu.bin").unlink()
    problems = failures(verify(kit, copy))
    assert "inventory: images/extra.bin is not named by the manifest" in problems
    assert "inventory: images/psu.bin is named by the manifest but absent" in problems


def _trust(kit: Kit, tmp_path: Path, **changes: object) -> Path:
    trust = tmp_path / "trust"
    shutil.copytree(kit.trust, trust)
    spec = json.loads((trust / "trust.json").read_text())
    for key, value in changes.items():
        section, field = key.split("__")
        target = spec["keys"][0] if section == "key" else spec["revocations"]
        target[field] = value
    (trust / "trust.json").write_text(json.dumps(spec))
    return trust


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"key__kid": "someone-else"}, f"key {KID!r} is not in the trust store"),
        ({"key__not_after": (NOW - timedelta(days=1)).isoformat()}, "expired at"),
        ({"key__not_before": (NOW + timedelta(days=1)).isoformat()}, "is not valid before"),
        ({"rev__revoked": [KID]}, "is revoked"),
        ({"rev__next_update": (NOW - timedelta(hours=1)).isoformat()}, "revocation status"),
    ],
)
def test_untrusted_signing_keys_are_refused(
    kit: Kit, tmp_path: Path, changes: dict[str, object], reason: str
) -> None:
    trust = _trust(kit, tmp_path, **changes)
    verdict = verify_bundle(kit.bundle, load_trust_store(trust), Policy(), now=NOW)
    assert not verdict.accepted
    assert any(reason in p for p in failures(verdict) if p.startswith("signature")), failures(
        verdict
    )


def test_a_blocking_review_issue_rejects_the_bundle(kit: Kit, copy: Path) -> None:
    vbios = (copy / "images" / "vbios.bin").read_bytes()
    issue = {
        "title": "Stack overflow in SPDM parser",
        "cvss_score": "8.1",
        "cvss_vector": "AV:N",
        "cwe": "CWE-121",
        "description": "...",
        "cve": None,
    }
    (copy / "safe" / "vbios.jws").write_text(
        jws.sign_compact(
            sfr_payload(vbios, issues=[issue]), kit.srp_key, alg="ES512", kid="test-srp"
        )
    )
    problems = failures(verify(kit, copy))
    assert any("Stack overflow in SPDM parser (CVSS 8.1)" in p for p in problems), problems
    assert not failures(verify(kit, copy, Policy(cvss_ceiling=9.0)))


def test_a_report_about_other_firmware_rejects_the_bundle(kit: Kit, copy: Path) -> None:
    (copy / "safe" / "vbios.jws").write_text(
        jws.sign_compact(sfr_payload(b"other firmware"), kit.srp_key, alg="ES512", kid="test-srp")
    )
    assert any("does not cover this image's hash" in p for p in failures(verify(kit, copy)))


def test_rim_chain_must_be_valid_at_the_policy_time(kit: Kit) -> None:
    later = Policy(rim_verification_time=NOW + timedelta(days=3650))
    problems = failures(verify(kit, kit.bundle, later))
    assert len(problems) == 1 and problems[0].startswith("rim:"), problems


def test_policy_can_require_evidence_the_bundle_lacks(kit: Kit) -> None:
    policy = Policy.model_validate({"require_safe": ["psu"], "require_rim": ["bmc"]})
    problems = failures(verify(kit, kit.bundle, policy))
    assert "safe: gb200/psu: policy requires a S.A.F.E. report" in problems
    assert "rim: gb200/bmc: policy requires a RIM and none is given" in problems


def _rewrite_manifest(kit: Kit, bundle: Path, edit: object) -> None:
    doc = json.loads((bundle / "manifest.json").read_text())
    edit(doc)  # type: ignore[operator]
    (bundle / "manifest.json").write_text(json.dumps(doc))
    build_bundle(bundle, kit.signing_key_pem, KID)


def test_pldm_package_for_another_device_is_rejected(kit: Kit, copy: Path) -> None:
    def other_vendor(doc: dict) -> None:  # type: ignore[type-arg]
        doc["profiles"]["gb200"]["bmc"]["device"] = [{"type": 0, "value_hex": "8680"}]

    _rewrite_manifest(kit, copy, other_vendor)
    assert any("no device record" in p for p in failures(verify(kit, copy)))


def test_pldm_version_must_equal_the_manifest(kit: Kit, copy: Path) -> None:
    def claim_newer(doc: dict) -> None:  # type: ignore[type-arg]
        doc["profiles"]["gb200"]["bmc"]["version"] = "25.07-1"

    _rewrite_manifest(kit, copy, claim_newer)
    assert any(
        "package version(s) ['25.06-2'] != manifest 25.07-1" in p
        for p in failures(verify(kit, copy))
    )


def test_component_below_its_lowest_supported_version_is_rejected(kit: Kit, copy: Path) -> None:
    def floor_above(doc: dict) -> None:  # type: ignore[type-arg]
        doc["profiles"]["gb200"]["gpu_vbios"]["lowest_supported_version"] = "97.00.B0.00.00"

    _rewrite_manifest(kit, copy, floor_above)
    assert any(
        "below the lowest supported 97.00.B0.00.00" in p for p in failures(verify(kit, copy))
    )


def test_a_floor_that_cannot_be_ordered_against_the_version_is_rejected(
    kit: Kit, copy: Path
) -> None:
    def floor_of_another_shape(doc: dict) -> None:  # type: ignore[type-arg]
        doc["profiles"]["gb200"]["gpu_vbios"]["lowest_supported_version"] = "GB300Nvl-24.12-8"

    _rewrite_manifest(kit, copy, floor_of_another_shape)
    assert any(
        "cannot be ordered against the lowest supported GB300Nvl-24.12-8" in p
        for p in failures(verify(kit, copy))
    )


def test_older_bundle_than_the_pinned_one_needs_a_signed_approval(kit: Kit, tmp_path: Path) -> None:
    newer = kit.manifest.model_copy(update={"created_at": NOW + timedelta(days=1)})
    verdict = verify(kit, kit.bundle, pinned=newer)
    assert any("older than the pinned" in p for p in failures(verdict))
    signing_key = _private(kit.signing_key_pem)
    approval = jws.sign_compact(
        json.dumps(
            {
                "bundle_id": "gb200-golden",
                "bundle_version": "2026.11.1",
                "approved_by": "sre-lead",
                "reason": "INC-4411",
            }
        ).encode(),
        signing_key,
        alg="ES384",
        kid=KID,
    )
    assert verify(kit, kit.bundle, pinned=newer, approvals=[approval.encode()]).accepted
    wrong = jws.sign_compact(
        b'{"bundle_id": "gb200-golden", "bundle_version": "0.1", "approved_by": "x"}',
        signing_key,
        alg="ES384",
        kid=KID,
    )
    assert not verify(kit, kit.bundle, pinned=newer, approvals=[wrong.encode()]).accepted


def test_security_version_may_not_decrease_against_the_pinned_bundle(kit: Kit) -> None:
    profiles = {p: dict(c) for p, c in kit.manifest.profiles.items()}
    vbios = next(c for c in profiles["gb200"] if c.value == "gpu_vbios")
    profiles["gb200"][vbios] = profiles["gb200"][vbios].model_copy(update={"security_version": 5})
    pinned = Manifest.model_validate(
        {**kit.manifest.model_dump(by_alias=True), "profiles": profiles}, strict=False
    )
    assert any(
        "security version 3 < pinned 5" in p
        for p in failures(verify(kit, kit.bundle, pinned=pinned))
    )


def test_missing_or_foreign_sbom_is_rejected(kit: Kit, copy: Path) -> None:
    (copy / "sbom.cdx.json").write_text('{"spdxVersion": "SPDX-2.3"}')
    assert "sbom: sbom.cdx.json is not CycloneDX (bomFormat/specVersion)" in failures(
        verify(kit, copy)
    )


def _private(path: Path) -> PrivateKeyTypes:
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    return load_pem_private_key(path.read_bytes(), password=None)


def test_a_corim_rim_signed_by_a_trusted_key_is_checked_against_the_image(
    kit: Kit, copy: Path, tmp_path: Path
) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    from lockstep_attest.testing.corim_fixtures import signed_corim

    key = ec.generate_private_key(ec.SECP384R1())
    trust = tmp_path / "trust"
    shutil.copytree(kit.trust, trust)
    (trust / "corim-keys" / "vbios-rim.pem").write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    vbios = (copy / "images" / "vbios.bin").read_bytes()
    (copy / "rim" / "vbios.swidtag").unlink()
    (copy / "rim" / "vbios.cbor").write_bytes(signed_corim(hashlib.sha384(vbios).hexdigest(), key))

    def use_corim(doc: dict) -> None:  # type: ignore[type-arg]
        doc["profiles"]["gb200"]["gpu_vbios"]["rim"] = "rim/vbios.cbor"

    _rewrite_manifest(kit, copy, use_corim)
    verdict = verify_bundle(copy, load_trust_store(trust), Policy(), now=NOW)
    assert verdict.accepted, failures(verdict)
    (copy / "rim" / "vbios.cbor").write_bytes(signed_corim("00" * 48, key))
    verdict = verify_bundle(copy, load_trust_store(trust), Policy(), now=NOW)
    assert any("no sha384 equals the image" in p for p in failures(verdict)), failures(verdict)


def _x5c_signed(kit: Kit, bundle: Path, trust: Path, *, leaf_days: int = 30) -> str:
    """Re-sign ``bundle`` with a certificate chain (x5c) under a root trusted in ``trust``."""
    import base64

    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding

    from lockstep_attest.testing import rim_fixtures as rf
    from lockstep_common.bundle import signed_bytes

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(x509.oid.NameOID.COMMON_NAME, cn)])

    root = rf.issue(
        name("Release Root"),
        issuer=None,
        validity=(NOW - timedelta(days=1), NOW + timedelta(days=900)),
        ca=True,
        key_usage=rf.CA_USAGE,
    )
    leaf = rf.issue(
        name("Release Signer"),
        issuer=root,
        ca=False,
        key_usage=rf.SIGNER_USAGE,
        validity=(NOW - timedelta(days=1), NOW + timedelta(days=leaf_days)),
    )
    (trust / "manifest-anchors").mkdir(exist_ok=True)
    (trust / "manifest-anchors" / "root.pem").write_bytes(root.cert.public_bytes(Encoding.PEM))
    chain = [
        base64.b64encode(c.public_bytes(Encoding.DER)).decode() for c in (leaf.cert, root.cert)
    ]
    manifest = json.loads((bundle / "manifest.json").read_text())
    token = jws.sign_compact(
        signed_bytes(manifest),
        leaf.key,
        alg="ES384",
        kid="release-signer",
        detached=True,
        extra_header={"x5c": chain},
    )
    (bundle / "manifest.jws").write_text(token)
    return "sha256:" + leaf.cert.fingerprint(hashes.SHA256()).hex()


def test_a_manifest_signed_with_a_certificate_chain_validates_to_a_manifest_anchor(
    kit: Kit, copy: Path, tmp_path: Path
) -> None:
    trust = _trust(kit, tmp_path)
    fingerprint = _x5c_signed(kit, copy, trust)
    verdict = verify_bundle(copy, load_trust_store(trust), Policy(), now=NOW)
    assert verdict.accepted, failures(verdict)
    assert any(c.reason.startswith("signed by CN=Release Signer") for c in verdict.checks)
    # Revoking the signer's certificate (by fingerprint) refuses it.
    spec = json.loads((trust / "trust.json").read_text())
    spec["revocations"]["revoked"] = [fingerprint]
    (trust / "trust.json").write_text(json.dumps(spec))
    problems = failures(verify_bundle(copy, load_trust_store(trust), Policy(), now=NOW))
    assert any("is revoked" in p for p in problems), problems


def test_a_certificate_chain_to_an_untrusted_root_or_past_expiry_is_refused(
    kit: Kit, copy: Path, tmp_path: Path
) -> None:
    trust = _trust(kit, tmp_path)
    _x5c_signed(kit, copy, trust, leaf_days=1)
    later = verify_bundle(copy, load_trust_store(trust), Policy(), now=NOW + timedelta(days=2))
    assert any(p.startswith("signature: manifest.jws: certificate chain") for p in failures(later))
    shutil.rmtree(trust / "manifest-anchors")
    problems = failures(verify_bundle(copy, load_trust_store(trust), Policy(), now=NOW))
    assert any("no anchor is trusted" in p for p in problems), problems
