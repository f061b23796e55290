"""Ctrl-C and SIGTERM (issue 14, item 9): an interrupted sweep says what was kept, and the
stack's signal handling works also where SIGINT starts out ignored (a background job of a
non-interactive shell)."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest
from typer.testing import CliRunner

from lockstep_cli.main import app
from lockstep_cli.supervisor import Interrupted, stop_signals_unwind

pytestmark = pytest.mark.unit


def test_an_interrupted_sweep_says_the_inventory_carries_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The inventory sweeps (``fleet.sweep``); Ctrl-C while waiting for it stops the waiting."""

    def interrupted(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt  # Ctrl-C while the inventory sweeps

    monkeypatch.setattr("lockstep_cli.ops_client.ask", interrupted)
    monkeypatch.setenv("LOCKSTEP_NATS_URL", "nats://127.0.0.1:1")
    result = CliRunner().invoke(app, ["fleet", "sweep"])
    assert result.exit_code == 130, result.output
    assert "interrupted: the inventory carries on with the sweep" in result.output
    assert "lockstep fleet status --watch" in result.output
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
