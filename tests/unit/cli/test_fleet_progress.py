"""The sweep progress bar: drawn on a terminal only, never into --json output."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from lockstep_cli.fleet_progress import bar

pytestmark = pytest.mark.unit


def test_bar_draws_on_a_terminal_and_stays_silent_otherwise() -> None:
    out = io.StringIO()
    with bar(Console(file=out, force_terminal=True, width=80), "sweeping", enabled=True) as cb:
        assert cb is not None
        cb(3, 4)
    assert "3/4" in out.getvalue()
    for console, enabled in (
        (Console(file=io.StringIO()), True),
        (Console(force_terminal=True), False),
    ):
        with bar(console, "sweeping", enabled=enabled) as cb:
            assert cb is None
