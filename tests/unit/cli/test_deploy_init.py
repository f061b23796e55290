"""``lockstep deploy init DIR`` writes every secret and derived file compose.yaml mounts (issue
31): the CA and the NATS nodes' certificate, nats-auth.conf from the generated permission
matrix with a bcrypt hash per identity, pgpass files and PostgreSQL's matching role file, the
approvers directory and a BMC credentials template; modes right, nothing secret in compose.yaml,
and a non-empty directory refused."""

from __future__ import annotations

import json
import re
import shutil
import stat
import subprocess
from pathlib import Path

import bcrypt
import pytest
import yaml
from cryptography import x509
from typer.testing import CliRunner

from lockstep_cli.catalog import bus_permissions
from lockstep_cli.main import app
from lockstep_common.subjects import Namespace
from lockstep_devstack.nats import nats_server_binary
from lockstep_redfish.credentials import FileCredentials

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[3]
IDENTITIES = ("admin", "cli", "reader", "inventory", "planner", "updater", "healthgate", "attest")
SERVICES = ("inventory", "planner", "updater", "healthgate", "attest")


def init(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["deploy", "init", *args])
    return result.exit_code, result.output


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("deploy") / "deployment"
    code, out = init(str(directory))
    assert code == 0, out
    return directory


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_every_secret_is_0600_and_every_directory_of_them_0700(deployed: Path) -> None:
    secrets = deployed / "secrets"
    for path in [deployed, *secrets.rglob("*")]:
        if path.is_dir():
            assert mode(path) == 0o700, path
        elif path.suffix == ".pem" and path.name != "server-key.pem":
            assert mode(path) == 0o644, path  # certificates, public
        else:
            assert mode(path) == 0o600, path
    assert mode(deployed / "approvers") == 0o700


def test_nats_auth_holds_each_identitys_hash_and_grants_and_no_password(deployed: Path) -> None:
    text = (deployed / "secrets" / "nats-auth.conf").read_text()
    users = json.loads(text[text.index("{") :])["users"]
    grants = bus_permissions(Namespace("lockstep"))
    assert sorted(u["user"] for u in users) == sorted(IDENTITIES)
    for user in users:
        password = (deployed / "secrets" / user["user"] / "nats-password").read_text().strip()
        assert password not in text
        assert bcrypt.checkpw(password.encode(), user["password"].encode()), user["user"]
        assert user["permissions"]["publish"]["allow"] == list(grants[user["user"]].publish)


def test_nats_server_accepts_the_users_and_the_certificate(deployed: Path, tmp_path: Path) -> None:
    tls = deployed / "secrets" / "tls"
    conf = tmp_path / "nats.conf"
    shutil.copy(deployed / "secrets" / "nats-auth.conf", tmp_path / "auth.conf")
    conf.write_text(
        "listen: 127.0.0.1:-1\n"
        f'tls {{ cert_file: "{tls / "server.pem"}"\n key_file: "{tls / "server-key.pem"}" }}\n'
        "include ./auth.conf\n"
    )
    checked = subprocess.run(
        [nats_server_binary(), "-t", "-c", str(conf)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stderr + checked.stdout
    cert = x509.load_pem_x509_certificate((tls / "server.pem").read_bytes())
    ca = x509.load_pem_x509_certificate((tls / "ca.pem").read_bytes())
    cert.verify_directly_issued_by(ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {"nats-1", "nats-2", "nats-3"} <= set(names.get_values_for_type(x509.DNSName))


def test_each_pgpass_matches_the_role_file_postgres_initialises_from(deployed: Path) -> None:
    roles = dict(
        line.split(":", 1)
        for line in (deployed / "secrets" / "postgres" / "roles").read_text().splitlines()
    )
    assert sorted(roles) == sorted(f"lockstep_{s}" for s in SERVICES)
    for service in SERVICES:
        host, _port, _db, role, password = (
            (deployed / "secrets" / service / "pgpass").read_text().strip().split(":")
        )
        assert (host, role, password) == ("postgres", f"lockstep_{service}", roles[role])
    superuser = (deployed / "secrets" / "postgres" / "password").read_text().strip()
    assert len(superuser) >= 32 and superuser not in roles.values()


def test_attest_gets_an_empty_trust_store_it_can_start_with(deployed: Path) -> None:
    """Without trust.json attest refuses to start (found by the container test); empty, it
    starts and rejects every bundle until a signer's key is added."""
    from lockstep_attestation.trust_store import load_trust_store

    store = load_trust_store(deployed / "secrets" / "trust")
    assert not store.keys


def test_the_bmc_template_is_a_credentials_file_the_services_read(deployed: Path) -> None:
    creds = FileCredentials(deployed / "secrets" / "bmc" / "credentials.json")
    assert creds.get("any-node") == ("CHANGE-ME", "CHANGE-ME")


def test_compose_mounts_what_init_wrote_and_holds_no_secret(deployed: Path) -> None:
    text = (ROOT / "compose.yaml").read_text()
    compose = yaml.safe_load(text)
    default = "${LOCKSTEP_DEPLOY_DIR:-./deployment}"
    for name, secret in compose["secrets"].items():
        assert secret["file"].startswith(default + "/"), name
        assert (deployed / secret["file"].removeprefix(default + "/")).is_file(), name
    used = {
        s if isinstance(s, str) else s["source"]
        for svc in compose["services"].values()
        for s in svc.get("secrets", [])
    }
    assert used == set(compose["secrets"]), "a secret declared and unused, or used undeclared"
    assert {"cli-nats-password", "bmc-credentials.json"} <= used
    for service in compose["services"].values():
        for key in service.get("environment") or {}:
            if re.search("PASSWORD|SECRET|TOKEN", key):
                assert key.endswith("_FILE"), f"{key} holds a secret in compose.yaml"
    assert not re.search(r"\$2a\$|BEGIN .*PRIVATE KEY", text)


def test_a_non_empty_directory_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    code, out = init(str(tmp_path))
    assert code == 2 and out.count("\n") == 1, out
    assert f"{tmp_path} is not empty: nothing written" in out
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_force_writes_new_secrets_into_it(deployed: Path, tmp_path: Path) -> None:
    copy = tmp_path / "d"
    shutil.copytree(deployed, copy)
    before = (copy / "secrets" / "planner" / "nats-password").read_text()
    code, out = init(str(copy), "--force")
    assert code == 0, out
    assert (copy / "secrets" / "planner" / "nats-password").read_text() != before


def test_a_file_where_the_directory_should_be_is_one_line(tmp_path: Path) -> None:
    target = tmp_path / "file"
    target.write_text("x")
    code, out = init(str(target))
    assert code == 2 and out.strip() == f"error: {target}: not a directory"
