"""`lockstep rollout status --watch` (issue 10, deliverable 7: live progress): off a terminal,
a line per change until the rollout completes or is aborted; with --json, a document each."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from typer.testing import CliRunner

from lockstep_cli import rollout_cli
from lockstep_cli.main import app

pytestmark = pytest.mark.unit


def doc(state: str, wave0: str, done: int, steps: dict[str, int]) -> dict[str, Any]:
    return {
        "rollout_id": "r-0123456789abcdef",
        "state": state,
        "change_class": "routine",
        "stack_hash": "ab" * 32,
        "approvals": [],
        "approvals_needed": 0,
        "reason": None,
        "waves": [
            {
                "number": 0,
                "state": wave0,
                "nodes": 5,
                "succeeded": done,
                "failed": 0,
                "gate_passed": wave0 == "passed",
                "components": ["gpu_vbios"],
            }
        ],
        "nodes_by_step": steps,
    }


@pytest.fixture
def progress(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, Any]]]:
    docs = [
        doc("running", "released", 0, {"waiting": 5}),
        doc("running", "released", 0, {"waiting": 5}),  # nothing changed: no line
        doc("running", "released", 2, {"activating": 3, "done": 2}),
        doc("completed", "passed", 5, {"done": 5}),
    ]
    served: list[dict[str, Any]] = []

    def status(settings: Any, rollout_id: str) -> dict[str, Any]:
        served.append(docs[min(len(served), len(docs) - 1)])
        return served[-1]

    monkeypatch.setattr(rollout_cli, "_status", status)
    monkeypatch.setattr(rollout_cli, "WATCH_POLL_S", 0)
    monkeypatch.setenv("LOCKSTEP_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    yield served


def test_watch_prints_a_line_per_change_and_ends_when_the_rollout_completes(
    progress: list[dict[str, Any]],
) -> None:
    result = CliRunner().invoke(app, ["rollout", "status", "r-0123456789abcdef", "--watch"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert len(lines) == 3 and len(progress) == 4  # the first read + 3 polls, none after the end
    assert lines[0].endswith("running w0:released(0+0/5) steps waiting=5")
    assert lines[1].endswith("running w0:released(2+0/5) steps activating=3,done=2")
    assert lines[2].endswith("completed w0:passed(5+0/5) steps done=5")


def test_watch_with_json_prints_one_document_per_change(progress: list[dict[str, Any]]) -> None:
    result = CliRunner().invoke(
        app, ["rollout", "status", "r-0123456789abcdef", "--watch", "--json"]
    )
    states = [json.loads(line)["state"] for line in result.output.splitlines()]
    assert result.exit_code == 0 and states == ["running", "running", "completed"]
