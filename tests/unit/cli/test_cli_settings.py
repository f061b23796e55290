"""A mistyped or unreachable server URL is one line naming the variable, exit 2, never a
traceback, and never the URL's password."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from lockstep_cli.main import app

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("LOCKSTEP_DATABASE_URL", "notaurl", "must start with postgres:// or postgresql://"),
        ("LOCKSTEP_DATABASE_URL", "mysql://u:secret@db/x", "not mysql://"),
        ("LOCKSTEP_DATABASE_URL", "postgresql://u:secret@db:99999/x", "not a URL"),
        ("LOCKSTEP_NATS_URL", "nats://ok:4222,notaurl", "must start with nats://"),
        ("LOCKSTEP_NATS_URL", "nats://", "names no host"),
        # A "/" in a password ends the host part early: urlsplit's own message quoted it.
        ("LOCKSTEP_DATABASE_URL", "postgresql://u:zq/secret@db/x", "not a URL"),
    ],
)
def test_a_malformed_server_url_is_one_line_naming_the_variable(
    variable: str, value: str, says: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(variable, value)
    result = CliRunner().invoke(app, ["fleet", "status"])
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1
    assert variable in lines[0]
    assert says in lines[0]
    assert "secret" not in result.output and "zq" not in result.output


@pytest.mark.parametrize("command", ["status", "sweep", "import"])
def test_fleet_commands_ask_the_inventory_not_the_database(
    command: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``fleet status``, ``sweep`` and ``import`` need no database: with none reachable and no
    NATS either, the one line names NATS (exit 3), never the database."""
    monkeypatch.setenv("LOCKSTEP_DATABASE_URL", "postgresql://u:secret@127.0.0.1:1/db")
    monkeypatch.setenv("LOCKSTEP_NATS_URL", "nats://127.0.0.1:1")
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        "- {id: n1, bmc_url: 'https://127.0.0.1:1', profile: gb200, site: s1,"
        " credentials: 'env:LOCKSTEP_TESTBMC'}\n"
    )
    args = [command, str(fleet)] if command == "import" else [command]
    result = CliRunner().invoke(app, ["fleet", *args])
    assert result.exit_code == 3, result.output
    assert result.output.count("\n") == 1
    assert "NATS at nats://127.0.0.1:1 unreachable" in result.output
    assert "postgresql" not in result.output and "secret" not in result.output


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("LOCKSTEP_STREAM_MAX_BYTES", '{"TELEMETRY": 5}', "stream_max_bytes TELEMETRY"),
        ("LOCKSTEP_NATS_USER", "cli", "lockstep up gives each service its own identity"),
    ],
)
def test_up_refuses_bad_shared_settings_before_starting_anything(
    variable: str, value: str, says: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(variable, value)
    data_dir = tmp_path / "data"
    result = CliRunner().invoke(app, ["up", "--data-dir", str(data_dir)])
    assert result.exit_code == 2, result.output
    assert says in result.output and "Traceback" not in result.output
    assert not data_dir.exists()  # nothing was started, not even the data directory made
