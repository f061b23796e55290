"""``lockstep up --nats-cluster N``: a count that cannot hold R3 streams with a majority, or a
cluster that contradicts the environment, is one line, exit 2, and nothing is started."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from lockstep_cli.main import app

pytestmark = pytest.mark.unit


def one_line(*args: str, env: dict[str, str] | None = None) -> str:
    result = CliRunner().invoke(app, list(args), env=env)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.output.count("\n") == 1, result.output
    return result.output


@pytest.mark.parametrize("size", ["0", "1", "2", "4", "-3"])
def test_a_cluster_size_that_is_not_odd_and_at_least_three_is_one_line(
    size: str, tmp_path: Path
) -> None:
    out = one_line("up", "--data-dir", str(tmp_path / "state"), "--nats-cluster", size)
    assert out == (
        f"error: --nats-cluster {size}: an R3 cluster needs an odd number of servers, 3 or more\n"
    )
    assert not (tmp_path / "state").exists()  # nothing made for a refused start


def test_a_cluster_with_an_external_nats_is_one_line(tmp_path: Path) -> None:
    out = one_line(
        "up",
        "--data-dir",
        str(tmp_path),
        "--nats-cluster",
        "3",
        env={"LOCKSTEP_NATS_URL": "nats://127.0.0.1:4222"},
    )
    assert out.startswith("error: --nats-cluster starts embedded nats-servers, but ")


def test_a_cluster_with_other_stream_replicas_is_one_line(tmp_path: Path) -> None:
    out = one_line(
        "up",
        "--data-dir",
        str(tmp_path),
        "--nats-cluster",
        "3",
        env={"LOCKSTEP_STREAM_REPLICAS": "1"},
    )
    assert out == (
        "error: LOCKSTEP_STREAM_REPLICAS=1: a --nats-cluster stack keeps 3 replicas of every "
        "stream; unset it\n"
    )


def test_replicated_streams_on_one_embedded_server_is_one_line(tmp_path: Path) -> None:
    out = one_line("up", "--data-dir", str(tmp_path), env={"LOCKSTEP_STREAM_REPLICAS": "3"})
    assert out == (
        "error: LOCKSTEP_STREAM_REPLICAS=3 needs a NATS cluster: add --nats-cluster 3, or "
        "unset it\n"
    )


def test_up_help_tells_what_a_cluster_runs() -> None:
    result = CliRunner().invoke(app, ["up", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    text = " ".join(result.output.replace("│", " ").split())  # rich's box and wrapping
    assert "--nats-cluster" in text
    assert "odd, 3 or more" in text and "two processes each" in text
