"""A bundle with a driver/CUDA/NCCL step: the driver package and what ships inside it attest as
one in-band unit; a part outside the package, an A/B claim, a GSP version other than the
driver's, or a tampered package is rejected with a reason that names it (docs/bundles.md
"In-band components")."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from lockstep_attest.testing.bundles import KID, DriverPackage, Kit, make_kit
from lockstep_attest.worker import attested_components
from lockstep_attestation.builder import build_bundle
from lockstep_attestation.policy import Policy
from lockstep_attestation.trust_store import load_trust_store
from lockstep_attestation.verification import Verdict, verify_bundle

pytestmark = pytest.mark.unit
NOW = datetime.now(UTC)
DRIVER = DriverPackage("595.58.03", cuda="13.2", nccl="2.27.7", package=b"nvidia-open 595.58.03")


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory) -> Kit:
    return make_kit(tmp_path_factory.mktemp("kit"), now=NOW, driver=DRIVER)


def verify(kit: Kit, bundle: Path) -> Verdict:
    return verify_bundle(bundle, load_trust_store(kit.trust), Policy(), now=NOW)


def failures(v: Verdict) -> list[str]:
    return [f"{c.check}: {c.reason}" for c in v.checks if c.result.value == "fail"]


def edited(kit: Kit, tmp_path: Path, edit: Callable[[dict[str, Any]], None]) -> Verdict:
    bundle = tmp_path / "bundle"
    shutil.copytree(kit.bundle, bundle)
    doc = json.loads((bundle / "manifest.json").read_text())
    edit(doc["profiles"]["gb200"])
    (bundle / "manifest.json").write_text(json.dumps(doc))
    build_bundle(bundle, kit.signing_key_pem, KID)  # signed again: only the rule can object
    return verify(kit, bundle)


def test_a_driver_package_attests_as_one_in_band_unit(kit: Kit) -> None:
    verdict = verify(kit, kit.bundle)
    assert verdict.accepted, failures(verdict)
    in_band = sorted(c.reason for c in verdict.checks if c.check == "in_band")
    assert in_band == [
        "gb200/cuda: 13.2, inside the driver package images/driver.run",
        "gb200/driver: 595.58.03 from images/driver.run, installed in band as one unit",
        "gb200/fabric_manager: 595.58.03, inside the driver package images/driver.run",
        "gb200/gpu_gsp: 595.58.03, inside the driver package images/driver.run",
        "gb200/nccl: 2.27.7, inside the driver package images/driver.run",
    ]
    # bundle.attested carries them to the planner and the updater, one image, one digest.
    parts = {c.component: c for c in attested_components(kit.manifest) if c.image.endswith(".run")}
    assert {(c.banks, c.activation) for c in parts.values()} == {("one_way", "in_band")}
    assert len({c.sha384 for c in parts.values()}) == 1


def test_a_bundle_without_in_band_components_has_no_in_band_finding(tmp_path: Path) -> None:
    plain = make_kit(tmp_path, now=NOW)
    assert not [c for c in verify(plain, plain.bundle).checks if c.check == "in_band"]


def test_a_tampered_driver_package_is_never_attested(kit: Kit, tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    shutil.copytree(kit.bundle, bundle)
    (bundle / "images" / "driver.run").write_bytes(b"nvidia-open 595.58.03 + rootkit")
    verdict = verify(kit, bundle)
    assert not verdict.accepted
    assert any(p.startswith("digest: images/driver.run: sha384") for p in failures(verdict))


def test_an_ab_driver_is_refused_no_bank_to_flip_back_to(kit: Kit, tmp_path: Path) -> None:
    def ab(gb200: dict[str, Any]) -> None:
        gb200["driver"].update(banks="ab")

    assert "in_band: gb200/driver: banks ab, activation in_band; an in-band package is " in (
        "".join(failures(edited(kit, tmp_path, ab)))
    )


def test_cuda_outside_the_driver_package_is_refused(kit: Kit, tmp_path: Path) -> None:
    def own_image(gb200: dict[str, Any]) -> None:
        gb200["cuda"].update(image="images/bmc.pldm")
        del gb200["cuda"]["sha384"], gb200["cuda"]["size"]

    assert "in_band: gb200/cuda: images/bmc.pldm is not the driver's package images/driver.run" in (
        failures(edited(kit, tmp_path, own_image))
    )


def test_nccl_without_a_driver_is_refused(kit: Kit, tmp_path: Path) -> None:
    def no_driver(gb200: dict[str, Any]) -> None:
        del gb200["driver"]

    problems = failures(edited(kit, tmp_path, no_driver))
    assert (
        "in_band: gb200/nccl: ships inside the driver package, and the profile names no driver"
        in problems
    )


def test_gsp_firmware_of_another_version_than_the_driver_is_refused(
    kit: Kit, tmp_path: Path
) -> None:
    def other_gsp(gb200: dict[str, Any]) -> None:
        gb200["gpu_gsp"].update(version="580.95.05")

    assert (
        "in_band: gb200/gpu_gsp: 580.95.05 != driver 595.58.03 (shipped in its package)"
        in failures(edited(kit, tmp_path, other_gsp))
    )


def test_firmware_claiming_in_band_activation_is_refused(kit: Kit, tmp_path: Path) -> None:
    def psu_in_band(gb200: dict[str, Any]) -> None:
        gb200["psu"].update(activation="in_band")

    assert (
        "in_band: gb200/psu: activation in_band, but only a driver package and its parts "
        "install in band" in failures(edited(kit, tmp_path, psu_in_band))
    )
