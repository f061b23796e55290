"""``lockstep sim run`` with a port already taken: one line naming the address, exit 2."""

from __future__ import annotations

import socket

import pytest
from typer.testing import CliRunner

from lockstep_cli.main import app

pytestmark = pytest.mark.integration


def test_a_taken_scheduler_port_is_one_line_naming_it() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(
            app,
            [
                "sim",
                "run",
                "--nodes",
                "2",
                "--host-base",
                "127.43.0.1",
                "--port",
                "0",
                "--scheduler-port",
                str(port),
            ],
        )
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in result.output
    assert f"('127.0.0.1', {port})" in lines[0] and "address already in use" in lines[0]
    assert f"(--port 0 or --scheduler-port {port}): choose another port" in lines[0]


def test_a_taken_bmc_port_is_one_line_naming_it() -> None:
    with socket.socket() as taken:
        taken.bind(("127.44.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(
            app, ["sim", "serve", "--nodes", "2", "--host-base", "127.44.0.1", "--port", str(port)]
        )
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines()[-1] == (
        f"error: Address already in use (--port {port} from 127.44.0.1): choose another port "
        "(0: any free)"
    )
