"""``lockstep up`` says in one line when an embedded server is not on its conventional port
because that port was taken (issue 31: it moved silently), and records each service's
metrics URL in stack.json."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lockstep_cli import stack_state
from lockstep_cli.stack_start import moved_ports

pytestmark = pytest.mark.unit


def test_a_server_off_its_conventional_port_is_named_in_one_line() -> None:
    line = moved_ports(
        {
            "NATS": "tls://127.0.0.1:40123",
            "PostgreSQL": "postgresql://lockstep_admin@127.0.0.1:5432/lockstep?passfile=/x",
        }
    )
    assert line is not None and "\n" not in line
    assert "NATS on 40123 (4222 was taken)" in line and "PostgreSQL" not in line
    both = moved_ports({"NATS": "tls://127.0.0.1:4300,tls://127.0.0.1:4301", "PostgreSQL":
                        "postgresql://a@127.0.0.1:40000/lockstep"})  # fmt: skip
    assert both is not None and "PostgreSQL on 40000 (5432 was taken)" in both


def test_nothing_is_said_when_the_usual_ports_were_free_or_the_servers_are_external() -> None:
    assert moved_ports({"NATS": "tls://127.0.0.1:4222"}) is None
    assert moved_ports({}) is None  # both named by LOCKSTEP_NATS_URL / LOCKSTEP_DATABASE_URL


def test_the_state_file_keeps_every_services_metrics_url(tmp_path: Path) -> None:
    metrics = {"planner": "http://127.0.0.1:40001/metrics", "updater-2": "http://127.0.0.1:2/m"}
    state = stack_state.StackState(
        os.getpid(), "tls://x:1", "postgresql://a@b/c", (), True, metrics
    )
    stack_state.save(tmp_path, state)
    assert stack_state.load(tmp_path).metrics == metrics


def test_a_local_stack_gives_the_planner_an_approvers_directory(tmp_path: Path) -> None:
    """Without one no class that needs an approval could start under `lockstep up`."""
    from lockstep_cli.supervisor import local_defaults

    env = local_defaults(tmp_path, {})
    approvers = tmp_path / "approvers"
    assert env == {"LOCKSTEP_PLANNER_APPROVERS_DIR": str(approvers)}
    assert approvers.is_dir() and approvers.stat().st_mode & 0o077 == 0
    # One the environment names is the operator's: left alone, nothing made.
    assert local_defaults(tmp_path / "other", {"LOCKSTEP_PLANNER_APPROVERS_DIR": "/x"}) == {}
    assert not (tmp_path / "other").exists()
