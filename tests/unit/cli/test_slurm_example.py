"""examples/slurm/README.md's prolog environment is one the CLI can connect with: the identity
allowed to ask for admission checks, its password file and the CA, over TLS (issue 31: without
them every job was requeued)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lockstep_common.bus_access import SENDER_IDENTITIES
from lockstep_common.settings import ServiceSettings, unknown_variables

pytestmark = pytest.mark.unit
README = Path(__file__).resolve().parents[3] / "examples" / "slurm" / "README.md"


def prolog_env() -> dict[str, str]:
    block = README.read_text().split("# /etc/lockstep/prolog.env", 1)[1].split("```", 1)[0]
    return dict(re.findall(r"^\s*(LOCKSTEP_\w+)=(\S+)\s*$", block, flags=re.MULTILINE))


def test_the_prolog_environment_authenticates_as_the_admission_identity_over_tls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = prolog_env()
    assert {"LOCKSTEP_NATS_USER", "LOCKSTEP_NATS_PASSWORD_FILE", "LOCKSTEP_NATS_CA_FILE"} <= set(
        env
    )
    assert env["LOCKSTEP_NATS_URL"].startswith("tls://")
    assert env["LOCKSTEP_NATS_USER"] in SENDER_IDENTITIES["schedulers"]
    assert unknown_variables(env, ServiceSettings) == []
    # The files it names, made as the README says: the settings load and connect with them.
    password, ca = tmp_path / "cli-nats-password", tmp_path / "nats-ca.pem"
    password.write_text("s3cret\n")
    password.chmod(0o600)
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    env.update(LOCKSTEP_NATS_PASSWORD_FILE=str(password), LOCKSTEP_NATS_CA_FILE=str(ca))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    access = ServiceSettings().nats_access()
    assert (access.user, access.password_file, access.ca_file) == ("cli", password, ca)
