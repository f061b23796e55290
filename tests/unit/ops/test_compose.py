"""compose.yaml is a deployment: one NATS cluster of three, PostgreSQL, and the five services
from one image, each with its own NATS identity and database role, and no secret in the file."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from lockstep_common.identities import SERVICE_NAMES
from tests.unit.ops.metric_names import ROOT

pytestmark = pytest.mark.unit

COMPOSE = ROOT / "compose.yaml"
NATS = ("nats-1", "nats-2", "nats-3")
DEPLOY = "${LOCKSTEP_DEPLOY_DIR:-./deployment}"


def services() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())  # resolves the << merge keys
    found: dict[str, Any] = doc["services"]
    return found


def nats_config(name: str) -> str:
    mounts: list[str] = services()[name]["volumes"]
    source: str = next(
        m.split(":", maxsplit=1)[0] for m in mounts if m.endswith(":/etc/nats/cluster.conf:ro")
    )
    return (ROOT / source).read_text()


def test_three_nats_servers_form_one_cluster_with_jetstream_and_tls() -> None:
    for name in NATS:
        assert services()[name]["environment"]["NATS_SERVER_NAME"] == name
        config = nats_config(name)
        routes = set(re.findall(r"nats-route://([\w-]+):6222", config))
        assert routes == set(NATS)
        assert "server_name: $NATS_SERVER_NAME" in config
        assert re.search(r"jetstream \{[^}]*sync_interval: always", config)
        assert re.search(r"cluster \{[^}]*name: lockstep", config)
        assert "include ./auth.conf" in config
        secrets = services()[name]["secrets"]
        assert {"source": "nats-auth.conf", "target": "/etc/nats/auth.conf"} in secrets


def test_postgres_and_the_five_services_come_from_one_build() -> None:
    svc = services()
    assert svc["postgres"]["image"] == "${LOCKSTEP_POSTGRES_IMAGE:-postgres:16-alpine}"
    assert set(SERVICE_NAMES) <= set(svc)
    built = {
        name: (repr(s.get("build")), s.get("image")) for name, s in svc.items() if "build" in s
    }
    # and the CLI as the operator and as a read-only reader (profile "tools": not started by up)
    assert set(built) == {*SERVICE_NAMES, "topology", "cli", "reader"}
    assert svc["cli"]["profiles"] == svc["reader"]["profiles"] == ["tools"]
    # One build for all: the repository, with the Slurm clients only when asked (issue 31).
    build = {"context": ".", "args": {"SLURM_CLIENTS": "${LOCKSTEP_SLURM_CLIENTS:-0}"}}
    assert set(built.values()) == {(repr(build), "lockstep:local")}
    for name in SERVICE_NAMES:
        assert svc[name]["entrypoint"] == ["python", "-m", f"lockstep_{name}"]
        main = ROOT / "services" / name / "src" / f"lockstep_{name}" / "__main__.py"
        assert main.is_file()
    # The Dockerfile itself: tests/unit/ops/test_dockerfile.py.


def test_the_topology_job_creates_r3_streams_with_the_services_replicas() -> None:
    # One shared variable: streams created with another count than a service checks against
    # would stop that service at start (TopologyMismatch).
    assert services()["topology"]["environment"]["LOCKSTEP_STREAM_REPLICAS"] == "3"


def test_every_service_has_its_own_nats_identity_and_database_role_by_file() -> None:
    svc = services()
    for name in SERVICE_NAMES:
        env = svc[name]["environment"]
        assert env["LOCKSTEP_NATS_USER"] == name
        assert env["LOCKSTEP_NATS_PASSWORD_FILE"] == f"/run/secrets/{name}-nats-password"
        assert env["LOCKSTEP_NATS_CA_FILE"] == "/run/secrets/nats-ca.pem"
        assert set(env["LOCKSTEP_NATS_URL"].split(",")) == {f"tls://{n}:4222" for n in NATS}
        assert env["LOCKSTEP_DATABASE_URL"] == (
            f"postgresql://lockstep_{name}@postgres:5432/lockstep"
            f"?passfile=/run/secrets/{name}-pgpass"
        )
        assert env["LOCKSTEP_STREAM_REPLICAS"] == "3"  # shared: the topology job's too
        assert env[f"LOCKSTEP_{name.upper()}_HTTP_HOST"] == "0.0.0.0"  # noqa: S104 - scraped
        assert {"nats-ca.pem", f"{name}-nats-password", f"{name}-pgpass"} <= set(
            svc[name]["secrets"]
        )
        assert svc[name]["depends_on"]["topology"]["condition"] == "service_completed_successfully"


def test_secrets_are_files_outside_git_and_no_password_is_written_in_the_file() -> None:
    doc = yaml.safe_load(COMPOSE.read_text())
    for name, secret in doc["secrets"].items():
        # What `lockstep deploy init DIR` wrote (tests/unit/cli/test_deploy_init.py).
        assert secret["file"].startswith(f"{DEPLOY}/secrets/"), name
    gitignore = (ROOT / ".gitignore").read_text().splitlines()
    dockerignore = (ROOT / ".dockerignore").read_text().splitlines()
    assert "deployment" in dockerignore
    assert "deployment/" in gitignore

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if re.search(r"password|secret|token", str(key), re.IGNORECASE) and not re.search(
                    r"_FILE$", str(key)
                ):
                    assert not isinstance(value, str) or value.startswith("/run/secrets/"), (
                        f"{path}.{key}"
                    )
                walk(value, f"{path}.{key}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{path}[{i}]")
        elif isinstance(node, str):
            assert not re.search(r"://[^/@\s]+:[^/@\s]+@", node), f"{path}: credentials in a URL"

    walk(doc["services"], "services")


def test_compose_waits_for_a_service_to_finish_stopping_before_killing_it() -> None:
    from lockstep_common.settings import ServiceSettings

    grace = ServiceSettings.model_fields["shutdown_grace_s"].default
    for name in SERVICE_NAMES:
        period = services()[name]["stop_grace_period"]
        assert period.endswith("s") and float(period[:-1]) > grace, (name, period)


def test_the_planner_reads_an_approvers_directory() -> None:
    """Issue 31: without one, no class that needs an approval could ever start."""
    planner = services()["planner"]
    where = planner["environment"]["LOCKSTEP_PLANNER_APPROVERS_DIR"]
    assert f"{DEPLOY}/approvers:{where}:ro" in planner["volumes"]
