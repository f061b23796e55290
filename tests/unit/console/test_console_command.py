"""``lockstep console``'s refusals: each one line, exit 2, nothing served."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from lockstep_cli.main import app

pytestmark = pytest.mark.unit


def one_line_refusal(args: list[str], says: str) -> str:
    result = CliRunner().invoke(app, ["console", *args])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert says in result.output, result.output
    return result.output


def test_beyond_loopback_without_tls_and_a_login_it_does_not_start() -> None:
    one_line_refusal(["--listen", "0.0.0.0:8080"], "beyond loopback: it needs --tls-cert")


def test_a_bad_listen_address_is_one_line() -> None:
    one_line_refusal(["--listen", "8080"], "expected HOST:PORT")


def test_a_token_file_others_can_read_is_refused(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    token.chmod(0o644)
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    out = one_line_refusal(
        [
            "--listen",
            "10.0.0.1:8443",
            "--tls-cert",
            str(cert),
            "--tls-key",
            str(key),
            "--token-file",
            str(token),
        ],
        "open to other users",
    )
    assert "s3cret" not in out


def test_it_reads_as_reader_and_no_other_identity(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    password = tmp_path / "pw"
    password.write_text("pw\n")
    password.chmod(0o600)
    monkeypatch.setenv("LOCKSTEP_NATS_URL", "nats://127.0.0.1:1")
    monkeypatch.setenv("LOCKSTEP_NATS_USER", "cli")
    monkeypatch.setenv("LOCKSTEP_NATS_PASSWORD_FILE", str(password))
    one_line_refusal([], "the console reads as `reader`, not `cli`")


@pytest.mark.parametrize(
    ("value", "says"),
    [("0.0.0.0:8080", "it is served on loopback only"), ("8080", "--console '8080'")],
)
def test_up_serves_the_console_on_loopback_only(value: str, says: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["up", "--data-dir", str(tmp_path / "d"), "--console", value])
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1 and says in result.output, result.output
    assert not (tmp_path / "d").exists()  # nothing was made for a refused start
