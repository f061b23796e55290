"""``lockstep bench startup``: the figures it reports, and admit skipped with its reason when
no stack runs where it is told to ask (a stack it starts itself: tests/e2e is too slow for a
unit test; tests/unit/cli/test_admit_quick.py answers admit from a fake server)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lockstep_cli.main import app

pytestmark = pytest.mark.unit


def test_json_has_medians_a_baseline_and_why_admit_was_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LOCKSTEP_NATS_URL", raising=False)
    result = CliRunner().invoke(
        app, ["bench", "startup", "--runs", "2", "--data-dir", str(tmp_path), "--json"]
    )
    assert result.exit_code == 0, result.output
    figures = json.loads(result.stdout)
    assert figures["help_s"] > figures["baseline_s"] > 0
    assert figures["admit_s"] is None
    assert figures["admit_skipped"] == f"no stack running under {tmp_path}"
    assert figures["goal_s"] == 0.3 and figures["runs"] == 2 and len(figures["load_average"]) == 3
    assert isinstance(figures["bytecode_compiled"], bool)
    assert figures["dont_write_bytecode"] == bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))


def test_a_source_counts_as_compiled_only_while_its_pyc_is_the_one_python_would_use(
    tmp_path: Path,
) -> None:
    # Figures measured without bytecode (PYTHONDONTWRITEBYTECODE=1, nothing compiled) are
    # twice as slow: the bench says which case it measured.
    import py_compile

    from lockstep_bench.startup import _current

    source = tmp_path / "mod.py"
    source.write_text("X = 1\n")
    assert not _current(source)  # never compiled
    py_compile.compile(str(source), doraise=True)
    assert _current(source)
    source.write_text("X = 22\n")  # edited since: another size (and mtime)
    assert not _current(source)


def test_admit_is_timed_against_the_stack_the_environment_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tests.unit.cli.fake_nats import fake_nats

    answer = json.dumps(
        {
            "specversion": "1.0",
            "type": "lockstep.admission.check.answered",
            "schemaversion": 1,
            "data": {"stack_hash": "0" * 64, "nodes": [{"node_id": "n1", "admitted": False}]},
        }
    ).encode()
    with fake_nats(lambda _: (None, answer)) as (url, seen):
        for name in [n for n in os.environ if n.startswith("LOCKSTEP_")]:
            monkeypatch.delenv(name)  # the quick path: the fake server speaks no JetStream
        monkeypatch.setenv("LOCKSTEP_NATS_URL", url)
        result = CliRunner().invoke(app, ["bench", "startup", "--runs", "2"])
    assert result.exit_code == 0, result.output
    assert len(seen.requests) == 2  # one admission check per run, answered
    assert "lockstep fleet admit, answered (goal <= 0.3)" in result.output
    assert "python -c pass (baseline)" in result.output
