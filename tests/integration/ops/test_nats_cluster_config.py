"""deploy/nats/cluster.conf is a configuration the pinned nats-server accepts, with the
operator's authorization file included the way compose.yaml mounts it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import bcrypt
import pytest

from lockstep_devstack.nats import nats_server_binary
from lockstep_devstack.tls import server_tls
from tests.unit.ops.metric_names import ROOT

pytestmark = pytest.mark.integration

CONFIG = ROOT / "deploy" / "nats" / "cluster.conf"


def check(directory: Path, server_name: str) -> subprocess.CompletedProcess[str]:
    """``nats-server -t`` on the committed file, the secrets' mount points moved into
    ``directory`` (the container's /run/secrets and /data)."""
    return subprocess.run(
        [nats_server_binary(), "-t", "-c", str(directory / "cluster.conf")],
        env={**os.environ, "NATS_SERVER_NAME": server_name},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        cwd=directory,
    )


@pytest.fixture
def mounted(tmp_path: Path) -> Path:
    tls = server_tls(tmp_path / "tls")
    text = CONFIG.read_text()
    for mount, file in (
        ("/run/secrets/nats-server-cert.pem", tls.cert),
        ("/run/secrets/nats-server-key.pem", tls.key),
        ("/run/secrets/nats-ca.pem", tls.ca),
        ("/data/jetstream", tmp_path / "jetstream"),
    ):
        text = text.replace(mount, str(file))
    (tmp_path / "cluster.conf").write_text(text)
    hashed = bcrypt.hashpw(b"not-a-real-password", bcrypt.gensalt(10, b"2a")).decode()
    (tmp_path / "auth.conf").write_text(
        f'authorization {{ users: [ {{user: "planner", password: "{hashed}"}} ] }}\n'
    )
    return tmp_path


def test_the_cluster_configuration_is_valid_for_every_node(mounted: Path) -> None:
    for name in ("nats-1", "nats-2", "nats-3"):
        done = check(mounted, name)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "is valid" in done.stdout + done.stderr


def test_without_the_operators_authorization_file_the_server_refuses_to_start(
    mounted: Path,
) -> None:
    (mounted / "auth.conf").unlink()
    done = check(mounted, "nats-1")
    assert done.returncode != 0
    assert "auth.conf" in done.stdout + done.stderr
