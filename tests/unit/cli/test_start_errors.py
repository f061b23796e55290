"""Bad start-up input is one line naming what is wrong, exit 2, no traceback: a data dir that
cannot be made or written, and a simulator NATS URL that is malformed or unreachable."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from lockstep_cli.main import app

pytestmark = pytest.mark.unit


def one_line(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.output.count("\n") == 1, result.output
    return result.output


@pytest.mark.parametrize("command", ["up", "demo"])
def test_a_data_dir_below_a_file_is_one_line(command: str, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    out = one_line(command, "--data-dir", str(tmp_path / "file" / "state"))
    assert f"--data-dir {tmp_path / 'file' / 'state'}: Not a directory" in out


def test_a_data_dir_that_is_a_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    out = one_line("up", "--data-dir", str(tmp_path / "file"))
    assert f"--data-dir {tmp_path / 'file'}: File exists" in out


def test_sim_run_with_a_malformed_nats_url_is_one_line() -> None:
    out = one_line("sim", "run", "--nodes", "2", "--nats-url", "notaurl")
    assert out == (
        "error: --nats-url: must start with nats:// or tls:// or ws:// or wss://, not no scheme\n"
    )


def test_sim_run_with_an_unreachable_nats_is_one_line_at_once() -> None:
    # Port 1 on loopback: refused at once; nats-py alone would retry every 2 s for minutes.
    out = one_line("sim", "run", "--nodes", "2", "--nats-url", "nats://127.0.0.1:1")
    assert out.startswith("error: NATS at nats://127.0.0.1:1 unreachable: ")


def test_a_verbose_fleet_command_leaves_no_choice_behind_for_the_next(tmp_path: Path) -> None:
    # One process, several commands (as here): -v and --data-dir belong to their invocation.
    CliRunner().invoke(app, ["fleet", "-v", "--data-dir", str(tmp_path), "list"])
    (tmp_path / "file").write_text("")
    out = one_line("up", "--data-dir", str(tmp_path / "file"))
    assert out.startswith("error: --data-dir") and "stack:" not in out
