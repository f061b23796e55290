"""The ``sim serve`` typer sub-app: options and defaults (the server itself is not started)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from lockstep_sim.cli import sim_app

pytestmark = pytest.mark.unit


def test_serve_help_lists_options_and_default_credentials() -> None:
    result = CliRunner().invoke(sim_app, ["serve", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for option in (
        "--nodes",
        "--profile",
        "--latency-ms",
        "--time-scale",
        "--seed",
        "--username",
        "--password",
    ):
        assert option in result.output
    assert "lockstep-sim" in result.output


def test_serve_rejects_unknown_profile() -> None:
    result = CliRunner().invoke(sim_app, ["serve", "--profile", "dgx"])
    assert result.exit_code != 0
