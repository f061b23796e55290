"""Commands find the stack ``lockstep up`` runs without exports: its state file fills in the
servers the environment does not name, an explicit variable wins, and with neither the user is
told how to start one (a default port could be another PostgreSQL on the machine)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lockstep_cli.main import app

pytestmark = pytest.mark.unit
# Nothing listens on these loopback ports: a command that got this far fails naming them.
STACK_DB = "postgresql://lockstep_admin@127.0.0.1:1/lockstep"
STACK_NATS = "tls://127.0.0.1:1"


def fake_stack(data_dir: Path, *, pid: int | None = None) -> Path:
    """A state file as `lockstep up` writes it, with the cli and admin secrets it names."""
    for identity in ("cli", "admin"):
        secret = data_dir / "secrets" / identity / "nats-password"
        secret.parent.mkdir(parents=True)
        secret.write_text("s3cret\n")
        secret.chmod(0o600)
    (data_dir / "nats" / "tls").mkdir(parents=True)
    (data_dir / "nats" / "tls" / "ca.pem").write_text("not used before connecting\n")
    state = {
        "pid": os.getpid() if pid is None else pid,
        "nats_url": STACK_NATS,
        "database_url": STACK_DB,
        "identities": ["cli", "admin", "inventory"],
        "secure": True,
    }
    (data_dir / "stack.json").write_text(json.dumps(state))
    return data_dir


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("LOCKSTEP_") and name != "LOCKSTEP_DATA_DIR":
            monkeypatch.delenv(name)


@pytest.mark.usefixtures("clean_env")
def test_no_url_and_no_stack_is_one_line_saying_how_to_start_one(tmp_path: Path) -> None:
    code, out = invoke("fleet", "--data-dir", str(tmp_path), "list")
    assert code == 2
    assert out.count("\n") == 1 and "Traceback" not in out
    assert f"no stack running under {tmp_path}" in out
    assert f"lockstep up --data-dir {tmp_path}" in out


@pytest.mark.usefixtures("clean_env")
def test_the_state_file_names_the_servers_and_the_cli_identity(tmp_path: Path) -> None:
    fake_stack(tmp_path)
    code, out = invoke("fleet", "--data-dir", str(tmp_path), "-v", "sweep")
    lines = out.strip().splitlines()
    assert code == 3 and len(lines) == 2, out
    assert lines[0] == (
        f"stack: NATS {STACK_NATS} as cli, namespace lockstep "
        f"(from {tmp_path / 'stack.json'} (lockstep up, pid {os.getpid()}) as cli)"
    )
    # The inventory sweeps, asked over the stack's NATS as cli: no database.
    assert f"NATS at {STACK_NATS} unreachable" in lines[1]
    # `fleet status` asks the inventory over the stack's NATS, as cli: no database.
    code, out = invoke("fleet", "--data-dir", str(tmp_path), "status")
    assert code == 3 and out.count("\n") == 1, out
    assert f"NATS at {STACK_NATS} unreachable" in out


@pytest.mark.usefixtures("clean_env")
def test_lockstep_data_dir_chooses_the_stack(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOCKSTEP_DATA_DIR", str(fake_stack(tmp_path)))
    code, out = invoke("dlq", "-v", "list", "inventory")
    assert code == 3  # the stack's NATS (nothing listens): the service is asked, no database
    assert f"from {tmp_path / 'stack.json'}" in out and "as cli" in out


@pytest.mark.usefixtures("clean_env")
def test_dlq_replay_talks_as_admin(tmp_path: Path) -> None:
    fake_stack(tmp_path)
    code, out = invoke("dlq", "--data-dir", str(tmp_path), "-v", "replay", "inventory", "1")
    assert code == 3
    assert f"NATS {STACK_NATS} as admin" in out


@pytest.mark.usefixtures("clean_env")
def test_an_explicit_variable_wins_over_the_state_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_stack(tmp_path)
    monkeypatch.setenv("LOCKSTEP_NATS_URL", "nats://127.0.0.1:2")
    code, out = invoke("fleet", "--data-dir", str(tmp_path), "-v", "sweep")
    assert code == 3
    assert "NATS nats://127.0.0.1:2 as anonymous" in out  # no user with the URL it named
    assert "PostgreSQL" not in out  # an operator command is given no database
    assert "and the environment" in out
    assert "127.0.0.1:2" in out.strip().splitlines()[-1]


@pytest.mark.usefixtures("clean_env")
def test_a_stack_that_stopped_is_named(tmp_path: Path) -> None:
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    pid = int(gone.stdout)
    fake_stack(tmp_path, pid=pid)
    code, out = invoke("fleet", "--data-dir", str(tmp_path), "list")
    assert code == 2 and out.count("\n") == 1
    assert f"the stack under {tmp_path} is not running (pid {pid} is gone)" in out


@pytest.mark.usefixtures("clean_env")
def test_both_variables_set_never_read_the_state_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "stack.json").write_text("not json")  # would be refused if it were read
    monkeypatch.setenv("LOCKSTEP_NATS_URL", "nats://127.0.0.1:1")
    monkeypatch.setenv("LOCKSTEP_DATABASE_URL", "postgresql://me@127.0.0.1:1/x")
    code, out = invoke("fleet", "--data-dir", str(tmp_path), "-v", "sweep")
    assert code == 3
    assert "(from the environment)" in out
