"""Credential sources: environment and file; errors never carry a secret."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lockstep_redfish.credentials import EnvCredentials, FileCredentials
from lockstep_redfish.errors import CredentialError

pytestmark = pytest.mark.unit


def test_env_credentials_per_node_then_default() -> None:
    env = {
        "LOCKSTEP_BMC_NODE_00001_USERNAME": "ops1",
        "LOCKSTEP_BMC_NODE_00001_PASSWORD": "p1",
        "LOCKSTEP_BMC_USERNAME": "ops",
        "LOCKSTEP_BMC_PASSWORD": "p",
    }
    source = EnvCredentials(environ=env)
    assert source.get("node-00001") == ("ops1", "p1")
    assert source.get("node-00002") == ("ops", "p")
    with pytest.raises(CredentialError, match="node-00003"):
        EnvCredentials(environ={}).get("node-00003")


def test_file_credentials(tmp_path: Path) -> None:
    path = tmp_path / "bmc.json"
    path.write_text(
        json.dumps(
            {
                "default": {"username": "ops", "password": "p"},
                "nodes": {"node-00001": {"username": "ops1", "password": "p1"}},
            }
        )
    )
    source = FileCredentials(path)
    assert source.get("node-00001") == ("ops1", "p1")
    assert source.get("node-00002") == ("ops", "p")


def test_malformed_credential_file_names_field_not_secret(tmp_path: Path) -> None:
    path = tmp_path / "bmc.json"
    path.write_text(json.dumps({"nodes": {"n1": {"username": "ops", "password": 12345678}}}))
    with pytest.raises(CredentialError) as info:
        FileCredentials(path)
    assert "nodes.n1.password" in str(info.value)
    assert "12345678" not in str(info.value)
    path.write_text(json.dumps({"nodes": {}}))
    with pytest.raises(CredentialError, match="no BMC credentials for n1"):
        FileCredentials(path).get("n1")
