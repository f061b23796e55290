"""`lockstep node quarantined` (issue 32): the updater's page of quarantined nodes, as a table
or JSON, with the command for the next page; bad input is one line and asks nothing."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from typer.testing import CliRunner

from lockstep_cli import node_cli
from lockstep_cli.main import app
from lockstep_common.events.v1 import (
    NodeQuarantinedAnswered,
    NodeQuarantinedRequested,
    QuarantinedNode,
)

pytestmark = pytest.mark.unit
AT = datetime(2026, 11, 29, 3, 14, tzinfo=UTC)


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    requests: list[Any] = []

    def ask(command: str, request: NodeQuarantinedRequested, answer: type[Any]) -> Any:
        requests.append((command, request))
        held = QuarantinedNode(
            node_id="n-07", rollout_id="r-1", wave=0, since=AT, reason="[red]XID 79[/red]"
        )
        return NodeQuarantinedAnswered(nodes=(held,), next_after="n-07")

    monkeypatch.setattr(node_cli, "_ask", ask)
    monkeypatch.setenv("COLUMNS", "200")
    return requests


def test_the_page_is_shown_with_the_next_page_to_ask_for(asked: list[Any]) -> None:
    result = CliRunner().invoke(app, ["node", "quarantined", "--after", "n-01", "--limit", "1"])
    assert result.exit_code == 0, result.output
    [(command, request)] = asked
    assert command == "node.quarantined" and (request.after, request.limit) == ("n-01", 1)
    assert "n-07" in result.output and "[red]XID 79[/red]" in result.output  # not markup
    assert "more: lockstep node quarantined --after n-07" in result.output
    result = CliRunner().invoke(app, ["node", "quarantined", "--json"])
    assert result.exit_code == 0 and '"next_after": "n-07"' in result.output


@pytest.mark.parametrize("bad", [["--after", "n.*"], ["--after", "a b"], ["--limit", "0"]])
def test_bad_input_is_one_line_and_asks_nothing(asked: list[Any], bad: list[str]) -> None:
    result = CliRunner().invoke(app, ["node", "quarantined", *bad])
    assert result.exit_code == 2 and asked == []
