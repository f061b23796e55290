"""The embedded PostgreSQL's password files and SCRAM verifiers."""

from __future__ import annotations

import base64
import hashlib
import hmac
import stat
from pathlib import Path

import pytest

from lockstep_devstack.pgpass import (
    check_identity,
    ensure_password,
    passfile_path,
    read_password,
    scram_verifier,
    write_password,
)

pytestmark = pytest.mark.unit


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_verifier_matches_the_rfc_7677_example_exchange() -> None:
    # RFC 7677 section 3: user "user", password "pencil"; the keys we store must produce the
    # client proof and the server signature of that exchange.
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    verifier = scram_verifier("pencil", salt=salt)
    method, rest = verifier.split("$", 1)
    params, keys = rest.split("$")
    assert method == "SCRAM-SHA-256" and params == "4096:W22ZaJ0SNY7soEsUEjb6gQ=="
    stored_key, server_key = (base64.b64decode(k) for k in keys.split(":"))
    nonce = "rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
    auth = (
        f"n=user,r=rOprNGfwEbeRWgbNEkqO,r={nonce},s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,"
        f"c=biws,r={nonce}"
    )
    server_signature = hmac.new(server_key, auth.encode(), hashlib.sha256).digest()
    assert base64.b64encode(server_signature).decode() == (
        "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    )
    proof = base64.b64decode("dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    client_signature = hmac.new(stored_key, auth.encode(), hashlib.sha256).digest()
    client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
    assert hashlib.sha256(client_key).digest() == stored_key  # the server's own check


def test_each_verifier_has_its_own_salt() -> None:
    assert scram_verifier("same") != scram_verifier("same")


@pytest.mark.parametrize("password", ["naïve", "tab\there"])
def test_a_password_saslprep_would_change_is_refused(password: str) -> None:
    with pytest.raises(ValueError, match="printable ASCII"):
        scram_verifier(password)


def test_a_password_is_generated_once_and_kept_private(tmp_path: Path) -> None:
    path = passfile_path(tmp_path / "secrets", "inventory")
    first = ensure_password(path, "lockstep_inventory")
    assert ensure_password(path, "lockstep_inventory") == first
    assert len(first) >= 40
    assert _mode(path) == 0o600
    assert _mode(path.parent) == 0o700
    assert _mode(path.parent.parent) == 0o700
    # libpq's format: host:port:database:user:password, for TCP and for the Unix socket.
    assert path.read_text().splitlines() == [
        f"127.0.0.1:*:*:lockstep_inventory:{first}",
        f"localhost:*:*:lockstep_inventory:{first}",
    ]


def test_loosened_permissions_are_tightened_again(tmp_path: Path) -> None:
    path = passfile_path(tmp_path / "secrets", "admin")
    ensure_password(path, "lockstep_admin")
    path.chmod(0o644)
    path.parent.chmod(0o755)
    ensure_password(path, "lockstep_admin")
    assert (_mode(path), _mode(path.parent)) == (0o600, 0o700)


def test_a_file_for_another_role_yields_no_password(tmp_path: Path) -> None:
    path = tmp_path / "pgpass"
    write_password(path, "lockstep_planner", "secret")
    assert read_password(path, "lockstep_planner") == "secret"
    assert read_password(path, "lockstep_updater") is None
    assert read_password(tmp_path / "missing", "lockstep_planner") is None


@pytest.mark.parametrize("password", ["a:b", "a\\b", "a\nb"])
def test_characters_libpq_would_need_escaped_are_refused(tmp_path: Path, password: str) -> None:
    with pytest.raises(ValueError, match="no ':'"):
        write_password(tmp_path / "pgpass", "r", password)


@pytest.mark.parametrize("identity", ["", "Inventory", "1x", "a-b", "../x", "a" * 49])
def test_an_identity_must_be_a_plain_name(identity: str) -> None:
    with pytest.raises(ValueError, match="not a valid identity"):
        check_identity(identity)
