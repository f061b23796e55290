"""deploy/postgres/init-roles.sh, as PostgreSQL's image runs it at initialisation: one role
per service, each password read from the postgres-roles secret, which the image's user owns
(the services' pgpass files are uid 10001's, mode 0600: it may not read them). ``psql`` is a
stand-in that records what it was asked; no database is started."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
import yaml

from lockstep_common.identities import SERVICE_NAMES
from tests.unit.ops.metric_names import ROOT

pytestmark = [
    pytest.mark.unit,
    pytest.mark.skipif(shutil.which("sh") is None, reason="no POSIX shell"),
]
SCRIPT = ROOT / "deploy" / "postgres" / "init-roles.sh"
PSQL = """#!/bin/sh
printf '%s\\n' "$*" >> "$PSQL_LOG"
cat >> "$PSQL_LOG"
"""


def run(tmp_path: Path, roles: str | None) -> tuple[int, str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    psql = bin_dir / "psql"
    psql.write_text(PSQL)
    psql.chmod(stat.S_IRWXU)
    roles_file = tmp_path / "postgres-roles"
    if roles is not None:
        roles_file.write_text(roles)
        roles_file.chmod(0o600)
    log = tmp_path / "psql.log"
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "PSQL_LOG": str(log),
        "POSTGRES_USER": "postgres",
        "POSTGRES_DB": "lockstep",
        "LOCKSTEP_POSTGRES_ROLES": str(roles_file),
    }
    shell = shutil.which("sh") or "sh"
    done = subprocess.run(
        [shell, str(SCRIPT)], env=env, capture_output=True, text=True, check=False
    )
    return done.returncode, done.stderr, log.read_text() if log.exists() else ""


def test_every_service_role_is_made_from_the_postgres_roles_file(tmp_path: Path) -> None:
    lines = "".join(f"lockstep_{s}:pw-{s}\n" for s in SERVICE_NAMES)
    code, err, asked = run(tmp_path, lines)
    assert code == 0, err
    for service in SERVICE_NAMES:
        assert f"-v role=lockstep_{service} -v schema={service} -v password=pw-{service}" in asked
    assert asked.count('CREATE ROLE :"role" WITH LOGIN NOINHERIT') == len(SERVICE_NAMES)


def test_a_missing_role_line_stops_it_naming_the_role(tmp_path: Path) -> None:
    lines = "".join(f"lockstep_{s}:pw\n" for s in SERVICE_NAMES if s != "planner")
    code, err, _ = run(tmp_path, lines)
    assert code == 1 and "has no line lockstep_planner:PASSWORD" in err


def test_an_unreadable_roles_file_is_one_line(tmp_path: Path) -> None:
    code, err, asked = run(tmp_path, None)
    assert code == 1 and "cannot read" in err and "postgres-roles" in err and not asked


def test_postgres_gets_its_own_roles_secret_and_none_of_the_services_files() -> None:
    doc = yaml.safe_load((ROOT / "compose.yaml").read_text())
    secrets = set(doc["services"]["postgres"]["secrets"])
    assert secrets == {"postgres-password", "postgres-roles"}
    assert doc["secrets"]["postgres-roles"] == {
        "file": "${LOCKSTEP_DEPLOY_DIR:-./deployment}/secrets/postgres/roles"
    }
