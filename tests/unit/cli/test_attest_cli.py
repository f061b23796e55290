"""The operator verifiers and bundle commands as a user runs them: output and exit codes."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lockstep_attest.testing import rim_fixtures
from lockstep_attest.testing.bundles import KID, Kit, make_kit
from lockstep_cli.main import app
from tests.reference import REFERENCE as SHARED_REFERENCE

pytestmark = pytest.mark.unit
REFERENCE = SHARED_REFERENCE / "ocp-safe"
runner = CliRunner()


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory) -> Kit:
    return make_kit(tmp_path_factory.mktemp("kit"))


def run(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


def test_bundle_verify_exits_0_and_lists_every_check_as_json(kit: Kit) -> None:
    code, out = run("bundle", "verify", str(kit.bundle), "--trust-store", str(kit.trust), "--json")
    assert code == 0, out
    result = json.loads(out)
    assert result["attested"] is True
    assert result["stack_hash"] == kit.manifest.stack_hash()
    assert {c["check"] for c in result["checks"]} >= {"signature", "digest", "sbom", "rollback"}


def test_bundle_verify_exits_1_naming_the_failed_check(kit: Kit, tmp_path: Path) -> None:
    bundle = tmp_path / "b"
    shutil.copytree(kit.bundle, bundle)
    (bundle / "images" / "psu.bin").write_bytes(b"not the image")
    code, out = run("bundle", "verify", str(bundle), "--trust-store", str(kit.trust), "--json")
    assert code == 1
    failed = [c for c in json.loads(out)["checks"] if c["result"] == "fail"]
    assert [c["check"] for c in failed] == ["digest"]
    assert "images/psu.bin" in failed[0]["reason"]


def test_bad_input_exits_2_and_changes_nothing(kit: Kit, tmp_path: Path) -> None:
    code, out = run("bundle", "verify", str(tmp_path / "nope"), "--trust-store", str(kit.trust))
    assert code == 2 and "does not exist" in out
    before = (kit.bundle / "manifest.json").read_bytes()
    bad_key = tmp_path / "key.pem"
    bad_key.write_text("not a key")
    code, out = run("bundle", "build", str(kit.bundle), "--key", str(bad_key), "--kid", KID)
    assert code == 2 and "not an unencrypted PEM private key" in out
    assert (kit.bundle / "manifest.json").read_bytes() == before


def test_building_never_prints_key_material(kit: Kit, tmp_path: Path) -> None:
    bundle = tmp_path / "b"
    shutil.copytree(kit.bundle, bundle)
    code, out = run("bundle", "build", str(bundle), "--key", str(kit.signing_key_pem), "--kid", KID)
    assert code == 0, out
    assert "PRIVATE KEY" not in out and "BEGIN" not in out
    secret_body = "".join(kit.signing_key_pem.read_text().splitlines()[1:-1])
    assert secret_body[:40] not in out


def test_rim_verify_accepts_a_valid_rim_and_refuses_it_after_expiry(tmp_path: Path) -> None:
    chain = rim_fixtures.make_chain()
    rim = tmp_path / "vbios.swidtag"
    rim.write_bytes(rim_fixtures.sign_swid(chain))
    anchor = tmp_path / "root.pem"
    anchor.write_bytes(rim_fixtures.root_pem(chain))
    code, out = run("attest", "rim", "verify", str(rim), "--trust-anchor", str(anchor), "--json")
    assert code == 0, out
    later = (datetime.now(UTC) + timedelta(days=3650)).isoformat()
    code, out = run(
        "attest", "rim", "verify", str(rim), "--trust-anchor", str(anchor), "--at", later, "--json"
    )
    assert code == 1
    assert json.loads(out)["checks"][0]["result"] == "fail"


def _reports() -> list[Path]:
    return sorted(p for p in (REFERENCE / "reports").rglob("*") if p.suffix in (".jws", ".jwt"))


def test_sfr_verify_accepts_a_real_report_and_refuses_one_changed_byte(tmp_path: Path) -> None:
    report = _reports()[0]
    keys = str(REFERENCE / "srp-keys")
    code, out = run(
        "attest",
        "sfr",
        "verify",
        str(report),
        "--srp-keys",
        keys,
        "--cvss-ceiling",
        "10.1",
        "--json",
    )
    assert code == 0, out
    assert json.loads(out)["checks"][0]["result"] == "pass"
    raw = bytearray(report.read_bytes())
    middle = raw.index(b".") + 10
    raw[middle] = ord("A") if raw[middle] != ord("A") else ord("B")
    tampered = tmp_path / report.name
    tampered.write_bytes(bytes(raw))
    code, out = run("attest", "sfr", "verify", str(tampered), "--srp-keys", keys, "--json")
    assert code == 1
    assert json.loads(out)["checks"][0]["check"] == "signature"


def test_sfr_verify_checks_the_image_it_is_given(kit: Kit, tmp_path: Path) -> None:
    keys = tmp_path / "srp"
    shutil.copytree(kit.trust / "srp-keys", keys)
    report = str(kit.bundle / "safe" / "vbios.jws")
    code, out = run(
        "attest",
        "sfr",
        "verify",
        report,
        "--srp-keys",
        str(keys),
        "--image",
        str(kit.bundle / "images" / "vbios.bin"),
        "--json",
    )
    assert code == 0, out
    code, out = run(
        "attest",
        "sfr",
        "verify",
        report,
        "--srp-keys",
        str(keys),
        "--image",
        str(kit.bundle / "images" / "psu.bin"),
        "--json",
    )
    assert code == 1
    assert {"check": "image_hash", "result": "fail"}.items() <= next(
        c for c in json.loads(out)["checks"] if c["check"] == "image_hash"
    ).items()
