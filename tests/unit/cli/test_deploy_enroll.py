"""``lockstep deploy enroll DIR NODE...|--all``: a compose deployment's node agents, each its own
nkey user in the deployment's nats-auth.conf with its own node's grants, its seed written for
the node (issue 31: the compose deployment completes a rollout with agents reporting). The
fixed identities' users stay as they were and the file is rewritten in place, since compose
bind-mounts the file itself and the servers read it again on SIGHUP."""

from __future__ import annotations

import json
import shutil
import stat
import subprocess
from pathlib import Path

import nkeys  # type: ignore[import-untyped]
import pytest
from typer.testing import CliRunner

from lockstep_cli import agent_cli
from lockstep_cli.catalog import bus_permissions
from lockstep_cli.main import app
from lockstep_common.bus_access import node_agent
from lockstep_common.identities import AGENT
from lockstep_common.natsconn import NatsAccess
from lockstep_common.subjects import Namespace
from lockstep_devstack.nats import nats_server_binary

pytestmark = pytest.mark.unit
SITES = {"node-00000": "site-ams1", "node-00001": "site-ams1", "node-00002": "site-fra2"}


def cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["deploy", *args])
    return result.exit_code, result.output


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("enroll") / "deployment"
    code, out = cli("init", str(directory))
    assert code == 0, out
    return directory


@pytest.fixture
def deployed(pristine: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of a fresh deployment whose inventory (asked over NATS) knows ``SITES``."""
    copy = tmp_path / "deployment"
    shutil.copytree(pristine, copy)
    asked: list[NatsAccess] = []

    def inventory(access: NatsAccess) -> dict[str, str]:
        asked.append(access)
        return dict(SITES)

    monkeypatch.setattr(agent_cli, "inventory_sites", inventory)
    return copy


def users(directory: Path) -> list[dict[str, object]]:
    text = (directory / "secrets" / "nats-auth.conf").read_text()
    found: list[dict[str, object]] = json.loads(text[text.index("{") :])["users"]
    return found


def test_each_node_gets_its_own_nkey_user_with_its_nodes_grants(deployed: Path) -> None:
    auth = deployed / "secrets" / "nats-auth.conf"
    before, inode = users(deployed), auth.stat().st_ino
    code, out = cli("enroll", str(deployed), "node-00000", "node-00002")
    assert code == 0, out
    assert "enrolled 2 node agent(s)" in out and "HUP" in out
    after = users(deployed)
    assert after[: len(before)] == before  # the fixed identities' users untouched
    assert auth.stat().st_ino == inode  # in place: a bind mount sees the new users
    template = bus_permissions(Namespace("lockstep"))[AGENT]
    agents = after[len(before) :]
    assert len(agents) == 2
    for node, user in zip(("node-00000", "node-00002"), agents, strict=True):
        seed = deployed / "secrets" / "agents" / f"{node}.nk"
        assert stat.S_IMODE(seed.stat().st_mode) == 0o600
        public = nkeys.from_seed(bytearray(seed.read_bytes().strip())).public_key.decode()
        assert user["nkey"] == public
        assert seed.read_text().strip() not in auth.read_text()
        grants = node_agent(template, SITES[node], node)
        permissions = user["permissions"]
        assert isinstance(permissions, dict)
        assert permissions["publish"] == {"allow": list(grants.publish)}
    assert stat.S_IMODE((deployed / "secrets" / "agents").stat().st_mode) == 0o700


def test_nats_server_accepts_the_users_after_enrolment(deployed: Path, tmp_path: Path) -> None:
    assert cli("enroll", str(deployed), "--all")[0] == 0
    assert len(users(deployed)) == 8 + len(SITES)
    tls = deployed / "secrets" / "tls"
    shutil.copy(deployed / "secrets" / "nats-auth.conf", tmp_path / "auth.conf")
    conf = tmp_path / "nats.conf"
    conf.write_text(
        "listen: 127.0.0.1:-1\n"
        f'tls {{ cert_file: "{tls / "server.pem"}"\n key_file: "{tls / "server-key.pem"}" }}\n'
        "include ./auth.conf\n"
    )
    checked = subprocess.run(
        [nats_server_binary(), "-t", "-c", str(conf)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stderr + checked.stdout


def test_enrolling_more_keeps_those_enrolled_and_init_force_keeps_them_too(
    deployed: Path,
) -> None:
    assert cli("enroll", str(deployed), "node-00000")[0] == 0
    first = users(deployed)[-1]
    assert cli("enroll", str(deployed), "node-00001")[0] == 0
    assert users(deployed)[-2] == first
    assert cli("init", str(deployed), "--force")[0] == 0
    assert [u["nkey"] for u in users(deployed) if "nkey" in u] == [
        first["nkey"],
        users(deployed)[-1]["nkey"],
    ]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ([], "name the nodes to enrol, or --all (not both)"),
        (["--all", "node-00000"], "name the nodes to enrol, or --all (not both)"),
        (["node.0"], "node id"),
        (["node-00009"], "unknown node(s) node-00009: not in the fleet"),
        (["node-00000", "--nats-url", "http://x:1"], "--nats-url: must start with"),
    ],
)
def test_bad_input_is_one_line_and_changes_nothing(
    deployed: Path, args: list[str], says: str
) -> None:
    before = (deployed / "secrets" / "nats-auth.conf").read_text()
    code, out = cli("enroll", str(deployed), *args)
    assert code == 2 and out.count("\n") == 1, out
    assert says in out, out
    assert (deployed / "secrets" / "nats-auth.conf").read_text() == before
    assert not (deployed / "secrets" / "agents").exists()


def test_a_directory_without_a_deployment_is_one_line(tmp_path: Path) -> None:
    code, out = cli("enroll", str(tmp_path), "node-00000")
    assert code == 2 and out.count("\n") == 1, out
    assert str(tmp_path) in out


def test_an_unreachable_server_is_one_line_soon_and_changes_nothing(
    pristine: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found running it: nats-py retried a refused connection for ever, and the command hung."""
    from lockstep_devstack.process import free_port

    copy = tmp_path / "deployment"
    shutil.copytree(pristine, copy)
    monkeypatch.setattr(agent_cli, "CONNECT_TIMEOUT_S", 1.0)
    url = f"tls://127.0.0.1:{free_port()}"
    code, out = cli("enroll", str(copy), "node-00000", "--nats-url", url)
    assert code == 3 and out.count("\n") == 1, out
    assert f"NATS at {url} unreachable" in out
    assert not (copy / "secrets" / "agents").exists()
