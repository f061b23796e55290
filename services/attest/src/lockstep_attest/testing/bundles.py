"""A complete, valid bundle and its trust store, made from scratch: for tests, the demo and
the benchmark. Every piece is real (a PLDM 1.3 package, a signed S.A.F.E. report, a signed
SWID RIM, a CycloneDX SBOM, a detached manifest signature); nothing here is a mock.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from lockstep_attest.testing import rim_fixtures
from lockstep_attestation import jws
from lockstep_attestation.builder import build_bundle
from lockstep_common.bundle import Manifest
from lockstep_common.pldm import (
    ComponentSpec,
    FormatRevision,
    RecordSpec,
    build_package,
    parse_package,
)

KID = "lockstep-release-test"
SRP_KID = "test-srp"
PCI_VENDOR_NVIDIA = (0x0000, 0x10DE)


@dataclass(frozen=True)
class Signer:
    """The release's keys: one trust store verifies every bundle signed with them."""

    signing_key: ec.EllipticCurvePrivateKey
    srp_key: ec.EllipticCurvePrivateKey
    rim_chain: rim_fixtures.RimChain

    @classmethod
    def new(cls) -> Signer:
        return cls(
            ec.generate_private_key(ec.SECP384R1()),
            ec.generate_private_key(ec.SECP521R1()),
            rim_fixtures.make_chain(),
        )


@dataclass(frozen=True)
class Kit:
    """Where the bundle and its trust store were written."""

    bundle: Path
    trust: Path
    signing_key_pem: Path
    manifest: Manifest
    srp_key: ec.EllipticCurvePrivateKey
    signer: Signer | None = None


def _pem_private(key: Any) -> bytes:
    return bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )


def _pem_public(key: Any) -> bytes:
    return bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


def sfr_payload(image: bytes, *, issues: list[dict[str, Any]] | None = None) -> bytes:
    """An OCP S.A.F.E. short-form report covering ``image``."""
    return json.dumps(
        {
            "review_framework_version": "1.1",
            "device": {
                "vendor": "NVIDIA",
                "product": "GB200 VBIOS",
                "category": "GPU",
                "repo_tag": "r580",
                "fw_version": "97.00.A1.00.02",
                "fw_hash_sha2_384": hashlib.sha384(image).hexdigest(),
                "fw_hash_sha2_512": hashlib.sha512(image).hexdigest(),
            },
            "audit": {
                "srp": "Test Review Provider",
                "methodology": "whitebox",
                "completion_date": "2026-10-01",
                "report_version": "1.0",
                "scope_number": 1,
                "cvss_version": "4.0",
                "issues": issues or [],
            },
        }
    ).encode()


def make_trust_store(
    root: Path,
    *,
    signing_key: Any,
    srp_key: Any,
    rim_root_pem: bytes,
    now: datetime,
    revoked: tuple[str, ...] = (),
) -> Path:
    """keys/, revocations, rim-anchors/, srp-keys/ in the documented layout."""
    for sub in ("keys", "rim-anchors", "srp-keys", "corim-keys"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    (root / "keys" / f"{KID}.pem").write_bytes(_pem_public(signing_key))
    (root / "srp-keys" / f"{SRP_KID}.pem").write_bytes(_pem_public(srp_key))
    (root / "rim-anchors" / "rim-root.pem").write_bytes(rim_root_pem)
    (root / "trust.json").write_text(
        json.dumps(
            {
                "keys": [
                    {
                        "kid": KID,
                        "public_key": f"keys/{KID}.pem",
                        "not_before": (now - timedelta(days=30)).isoformat(),
                        "not_after": (now + timedelta(days=365)).isoformat(),
                    }
                ],
                "revocations": {
                    "revoked": list(revoked),
                    "issued_at": (now - timedelta(days=1)).isoformat(),
                    "next_update": (now + timedelta(days=7)).isoformat(),
                },
            },
            indent=2,
        )
    )
    return root


def _device_of(package: bytes) -> list[dict[str, Any]]:
    """The manifest's ``device`` for a package: its first record's descriptors."""
    record = parse_package(package).device_records[0]
    return [{"type": d.type, "value_hex": d.data.hex()} for d in record.descriptors]


@dataclass(frozen=True)
class DriverPackage:
    """A driver package for the in-band step: the CUDA user space and NCCL it brings."""

    version: str
    cuda: str
    nccl: str
    package: bytes


def driver_entries(driver: DriverPackage, image: str) -> dict[str, dict[str, Any]]:
    """The manifest entries of one driver package: the driver, and what ships inside it (GSP
    firmware and fabric manager at the driver's own version, CUDA user space, NCCL), every one
    naming the same image (docs/bundles.md "In-band components"). ``one_way``: no bank to flip
    back to; ``in_band``: installed by the node agent, not the BMC."""
    entry = {"format": "vendor", "banks": "one_way", "activation": "in_band", "image": image}
    return {
        "driver": {**entry, "version": driver.version},
        "gpu_gsp": {**entry, "version": driver.version},
        "fabric_manager": {**entry, "version": driver.version},
        "cuda": {**entry, "version": driver.cuda},
        "nccl": {**entry, "version": driver.nccl},
    }


def write_bulk_image(path: Path, size: int) -> None:
    """``size`` bytes that differ per MiB (cheap to make, as costly to hash as random data)."""
    block = os.urandom(1 << 20)
    with path.open("wb") as f:
        for i in range(0, size, 1 << 20):
            piece = i.to_bytes(8, "little") + block[8:]
            f.write(piece[: min(1 << 20, size - i)])


def make_kit(
    tmp: Path,
    *,
    now: datetime | None = None,
    image_bytes: int = 64 << 10,
    bulk: tuple[int, int] = (0, 0),
    gpu_image: tuple[str, bytes] | None = None,
    only: tuple[str, ...] | None = None,
    bmc_image: tuple[str, bytes] | None = None,
    nic_image: tuple[str, bytes] | None = None,
    bios_image: tuple[str, bytes] | None = None,
    signer: Signer | None = None,
    name: str = "bundle",
    bundle_version: str = "2026.11.1",
    driver: DriverPackage | None = None,
) -> Kit:
    """A signed, valid bundle: PLDM BMC, VBIOS with RIM + SFR, one-way PSU, plus ``bulk`` =
    (count, size) extra vendor images in profiles bulk-0.. (for the benchmark).

    ``gpu_image`` = (version, image) replaces the random VBIOS (an image the simulator's GPUs
    accept, for an end-to-end rollout), ``bmc_image`` the BMC's PLDM package; ``nic_image``
    adds a NIC firmware image, ``bios_image`` a BIOS (UEFI) one; ``driver`` adds the in-band
    step (:func:`driver_entries`); ``only`` keeps just those gb200 components. Kits made with one
    ``signer`` (written to ``tmp/name``) share ``tmp/trust``: one attest service verifies them
    all."""
    now = now or datetime.now(UTC)
    bundle, trust = tmp / name, tmp / "trust"
    for sub in ("images", "rim", "safe"):
        (bundle / sub).mkdir(parents=True, exist_ok=True)
    signer = signer or Signer.new()
    signing_key, srp_key = signer.signing_key, signer.srp_key
    bmc_version, bmc = bmc_image or (
        "25.06-2",
        build_package(
            revision=FormatRevision.V1_3,
            version="25.06-2",
            release_time=now,
            components=[
                ComponentSpec(image=os.urandom(image_bytes), identifier=1, version="25.06-2")
            ],
            device_records=[
                RecordSpec(
                    descriptors=[PCI_VENDOR_NVIDIA], applicable_components=[0], version="25.06-2"
                )
            ],
        ),
    )
    vbios_version, vbios = gpu_image or ("97.00.A1.00.02", os.urandom(image_bytes))
    psu = os.urandom(image_bytes // 4)
    (bundle / "images" / "bmc.pldm").write_bytes(bmc)
    (bundle / "images" / "vbios.bin").write_bytes(vbios)
    (bundle / "images" / "psu.bin").write_bytes(psu)
    chain = signer.rim_chain
    (bundle / "rim" / "vbios.swidtag").write_bytes(
        rim_fixtures.sign_swid(chain, measurements=[hashlib.sha384(vbios).hexdigest()])
    )
    (bundle / "safe" / "vbios.jws").write_text(
        jws.sign_compact(sfr_payload(vbios), srp_key, alg="ES512", kid=SRP_KID)
    )
    (bundle / "sbom.cdx.json").write_text(
        json.dumps(
            {
                "bomFormat": "CycloneDX",
                "specVersion": "1.6",
                "version": 1,
                "components": [{"type": "firmware", "name": n} for n in ("bmc", "vbios", "psu")],
            }
        )
    )
    entry = {"format": "vendor", "banks": "ab", "activation": "reset"}
    manifest: dict[str, Any] = {
        "schema": "lockstep.bundle/v1",
        "bundle_id": "gb200-golden",
        "bundle_version": bundle_version,
        "created_at": now.isoformat(),
        "profiles": {
            "gb200": {
                "bmc": {
                    **entry,
                    "format": "pldm",
                    "version": bmc_version,
                    "image": "images/bmc.pldm",
                    "device": _device_of(bmc),
                },
                "gpu_vbios": {
                    **entry,
                    "version": vbios_version,
                    "image": "images/vbios.bin",
                    "rim": "rim/vbios.swidtag",
                    "safe": ["safe/vbios.jws"],
                    "lowest_supported_version": "97.00.90.00.00",
                    "security_version": 3,
                },
                "psu": {
                    **entry,
                    "banks": "one_way",
                    "activation": "ac_cycle",
                    "version": "1.4.2",
                    "image": "images/psu.bin",
                },
            }
        },
    }
    if nic_image is not None:
        (bundle / "images" / "nic.bin").write_bytes(nic_image[1])
        manifest["profiles"]["gb200"]["nic"] = {
            **entry,
            "version": nic_image[0],
            "image": "images/nic.bin",
        }
    if bios_image is not None:
        (bundle / "images" / "bios.bin").write_bytes(bios_image[1])
        manifest["profiles"]["gb200"]["bios"] = {
            **entry,
            "version": bios_image[0],
            "image": "images/bios.bin",
        }
    if driver is not None:
        (bundle / "images" / "driver.run").write_bytes(driver.package)
        manifest["profiles"]["gb200"].update(driver_entries(driver, "images/driver.run"))
    if only is not None:
        gb200 = manifest["profiles"]["gb200"]
        kept = {c: e for c, e in gb200.items() if c in only}
        manifest["profiles"]["gb200"] = kept
        named = {f for e in kept.values() for f in (e["image"], e.get("rim"), *e.get("safe", ()))}
        for e in gb200.values():  # every file in a bundle must be named by its manifest
            for file in (e["image"], e.get("rim"), *e.get("safe", ())):
                if file and file not in named:
                    (bundle / file).unlink(missing_ok=True)  # in-band entries share one
    for i in range(bulk[0]):
        write_bulk_image(bundle / "images" / f"bulk-{i}.bin", bulk[1])
        manifest["profiles"][f"bulk-{i}"] = {
            "nic": {**entry, "version": "28.43.1000", "image": f"images/bulk-{i}.bin"}
        }
    (bundle / "manifest.json").write_text(json.dumps(manifest, indent=2))
    key_pem = tmp / "signing-key.pem"
    # A private key: its owner's alone from the moment it exists (the demo keeps it after it
    # ends, in a directory others may enter).
    key_pem.unlink(missing_ok=True)
    fd = os.open(key_pem, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(_pem_private(signing_key))
    make_trust_store(
        trust,
        signing_key=signing_key,
        srp_key=srp_key,
        rim_root_pem=rim_fixtures.root_pem(chain),
        now=now,
    )
    built = build_bundle(bundle, key_pem, KID)
    return Kit(bundle, trust, key_pem, built, srp_key, signer)
