"""`lockstep rollout status` names the plan's strata with their size, canary and control nodes
(issue 32), counted whole even where the planner's answer names only the first few ids."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from lockstep_cli import rollout_cli
from lockstep_cli.main import app
from tests.unit.cli.test_rollout_watch import doc

pytestmark = pytest.mark.unit


def stratum(supplier: str, canary: list[str], count: int, size: int | None) -> dict[str, Any]:
    controls = [n.replace("c", "k") for n in canary]
    return {
        "profile": "gb200",
        "supplier": supplier,
        "stack": "ab" * 32,
        "canary": canary,
        "canary_count": count,
        "controls": controls,
        "controls_count": count,
        "size": size,
    }


def status_of(monkeypatch: pytest.MonkeyPatch, strata: list[dict[str, Any]]) -> str:
    shown = {**doc("running", "released", 0, {"waiting": 5}), "deferred": {}, "strata": strata}
    monkeypatch.setattr(rollout_cli, "_status", lambda settings, rollout_id: shown)
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("LOCKSTEP_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    result = CliRunner().invoke(app, ["rollout", "status", "r-0123456789abcdef"])
    assert result.exit_code == 0, result.output
    return result.output


def test_status_names_each_stratum_and_counts_what_it_does_not_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = status_of(
        monkeypatch,
        [
            stratum("acme", ["c-01", "c-02"], 2, 36),
            # The planner named 2 of 200 (a plan with many strata): 198 more, not 194.
            stratum("[bold red]globex", ["c-03", "c-04"], 200, None),
        ],
    )
    assert "strata, canary and control nodes" in out
    assert "2: c-01, c-02 " in out and "2: k-01, k-02 " in out and " 36 " in out
    assert "200: c-03, c-04 and 198 more" in out and "200: k-03, k-04 and 198 more" in out
    assert "[bold red]globex" in out  # a service's text is shown as it is, not read as markup


def test_status_of_a_rollout_without_strata_has_no_strata_table(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert "strata" not in status_of(monkeypatch, [])
