"""The approvers trust store follows its directory without a restart (issue 31): an approver
whose key is copied in can approve at once, one whose key is removed is refused from the next
approval on, and a foreign file fails closed."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.rsa import generate_private_key

from lockstep_common.errors import ConfigurationError
from lockstep_planner.app import load_approvers_of
from lockstep_planner.domain.approvals import refusal
from lockstep_planner.settings import Settings
from lockstep_planner.testing.kit import sign

pytestmark = pytest.mark.unit
PLAN = "c" * 64
ALICE, BOB = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()


def pem(key: Ed25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def approve(store: Mapping[str, Ed25519PublicKey], key: Ed25519PrivateKey, name: str) -> str | None:
    """What the planner answers an approval by ``name`` of rollout r1 (None: it counts)."""
    approval = sign(key, name, "r1", PLAN)
    return refusal(approval, rollout_id="r1", plan_hash=PLAN, keys=store, seen=())


def test_an_added_approver_can_approve_without_a_restart(tmp_path: Path) -> None:
    (tmp_path / "alice.pem").write_bytes(pem(ALICE))
    store = load_approvers_of(Settings(approvers_dir=tmp_path))
    assert approve(store, BOB, "bob") == "approver 'bob' is not in the approvers trust store"
    (tmp_path / "bob.pem").write_bytes(pem(BOB))
    assert approve(store, BOB, "bob") is None
    assert approve(store, ALICE, "alice") is None


def test_a_removed_approver_is_refused_from_the_next_approval_on(tmp_path: Path) -> None:
    (tmp_path / "alice.pem").write_bytes(pem(ALICE))
    (tmp_path / "bob.pem").write_bytes(pem(BOB))
    store = load_approvers_of(Settings(approvers_dir=tmp_path))
    assert approve(store, ALICE, "alice") is None
    (tmp_path / "alice.pem").unlink()
    assert approve(store, ALICE, "alice") == (
        "approver 'alice' is not in the approvers trust store"
    )
    assert approve(store, BOB, "bob") is None


def test_a_replaced_key_verifies_only_the_new_one(tmp_path: Path) -> None:
    """A key rotated in place: the old private key no longer approves as alice."""
    (tmp_path / "alice.pem").write_bytes(pem(ALICE))
    store = load_approvers_of(Settings(approvers_dir=tmp_path))
    (tmp_path / "alice.pem").write_bytes(pem(BOB))
    assert "does not verify with alice's key" in str(approve(store, ALICE, "alice"))
    assert approve(store, BOB, "alice") is None


def test_a_foreign_file_added_later_fails_closed_and_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "alice.pem").write_bytes(pem(ALICE))
    store = load_approvers_of(Settings(approvers_dir=tmp_path))
    rsa = generate_private_key(65537, 2048).public_key()
    (tmp_path / "mallory.pem").write_bytes(
        rsa.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    with caplog.at_level(logging.ERROR):
        assert "not in the approvers trust store" in str(approve(store, ALICE, "alice"))
    assert "mallory.pem: not an Ed25519 key" in caplog.text
    (tmp_path / "mallory.pem").unlink()
    assert approve(store, ALICE, "alice") is None


def test_a_missing_directory_later_fails_closed(tmp_path: Path) -> None:
    keys = tmp_path / "approvers"
    keys.mkdir()
    (keys / "alice.pem").write_bytes(pem(ALICE))
    store = load_approvers_of(Settings(approvers_dir=keys))
    (keys / "alice.pem").unlink()
    keys.rmdir()
    assert "not in the approvers trust store" in str(approve(store, ALICE, "alice"))


def test_a_bad_key_at_start_still_stops_the_planner(tmp_path: Path) -> None:
    (tmp_path / "alice.pem").write_bytes(b"not a key")
    with pytest.raises(ConfigurationError, match=r"approvers_dir: .*alice\.pem: not a PEM"):
        load_approvers_of(Settings(approvers_dir=tmp_path))
