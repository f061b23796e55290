"""Ctrl-C and SIGTERM (issue 14, item 9): an interrupted sweep says what was kept, and the
stack's signal handling works also where SIGINT starts out ignored (a background job of a
non-interactive shell)."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import Any

import pytest
from typer.testing import CliRunner

from lockstep_cli.main import app
from lockstep_cli.supervisor import Interrupted, stop_signals_unwind

pytestmark = pytest.mark.unit


def test_an_interrupted_sweep_says_how_many_nodes_were_committed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def interrupted_sweep(
        settings: Any, node_ids: Any, *, on_busy: Any, on_progress: Callable[[int, int], None]
    ) -> None:
        on_progress(256, 1000)  # one chunk committed ...
        raise KeyboardInterrupt  # ... then Ctrl-C

    monkeypatch.setattr("lockstep_inventory.admin.sweep_fleet", interrupted_sweep)
    monkeypatch.setenv("LOCKSTEP_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    result = CliRunner().invoke(app, ["fleet", "sweep"])
    assert result.exit_code == 130, result.output
    assert "interrupted: 256 of 1000 node(s) read and committed" in result.output
    assert "the next sweep reads every node again" in result.output
    assert "Traceback" not in result.output


def test_sigint_interrupts_even_when_it_started_out_ignored() -> None:
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as `lockstep up &` in a script
    try:
        with pytest.raises(KeyboardInterrupt), stop_signals_unwind():
            os.kill(os.getpid(), signal.SIGINT)
            signal.sigtimedwait([], 0)  # let the handler run before the block ends
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # restored afterwards
    finally:
        signal.signal(signal.SIGINT, previous)


def test_sigterm_unwinds_like_ctrl_c() -> None:
    with pytest.raises(Interrupted), stop_signals_unwind():
        os.kill(os.getpid(), signal.SIGTERM)
        signal.sigtimedwait([], 0)
