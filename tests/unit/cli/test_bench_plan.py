"""``lockstep bench plan``: the figures it reports, and a clear line for a bad class."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from lockstep_cli.main import app

pytestmark = pytest.mark.unit


def test_json_has_the_figures_the_issue_names() -> None:
    result = CliRunner().invoke(
        app, ["bench", "plan", "--nodes", "600", "--domains", "100", "--runs", "1", "--json"]
    )
    assert result.exit_code == 0, result.output
    figures = json.loads(result.stdout)
    for key in ("seconds", "peak_mb", "makespan_s", "lower_bound_s", "ratio"):
        assert figures[key] > 0
    assert figures["lower_bound_s"] <= figures["makespan_s"]
    assert figures["ratio"] == round(figures["makespan_s"] / figures["lower_bound_s"], 3)
    assert figures["nodes"] == 600
    assert figures["change_class"] == "routine"


def test_the_table_names_the_goals() -> None:
    result = CliRunner().invoke(
        app,
        [
            "bench",
            "plan",
            "--nodes",
            "300",
            "--domains",
            "50",
            "--runs",
            "1",
            "--class",
            "power_fabric",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "goal <= 2 s" in result.stdout
    assert "goal <= 1.15" in result.stdout


@pytest.mark.parametrize(
    ("change_class", "message"),
    [
        (
            "weekly",
            "error: --class: 'weekly' is not one of emergency, routine, standard, power_fabric",
        ),
        (
            "standard",
            "error: the generated fleet cannot be planned as standard: change class "
            "standard: the pinned versions are unknown",
        ),
    ],
)
def test_a_class_that_cannot_plan_the_fleet_is_one_line_and_exit_2(
    change_class: str, message: str
) -> None:
    result = CliRunner().invoke(
        app, ["bench", "plan", "--nodes", "50", "--domains", "10", "--class", change_class]
    )
    assert result.exit_code == 2
    assert message in result.stderr
    assert "Traceback" not in result.output
