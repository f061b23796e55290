"""The sweep progress bar: drawn on a terminal only, never into --json output."""

from __future__ import annotations

import datetime as dt
import io
import threading

import pytest
from rich.console import Console

from lockstep_cli.fleet_progress import bar, while_sweeping
from lockstep_common.events.v1 import Conformance, FleetStatusAnswered, SweepState

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


def status_at(done: int, *, running: bool = True) -> FleetStatusAnswered:
    counts = Conformance(
        nodes=4, conforming=4, drifted=0, unreadable=0, unobserved=0, conformance_ratio=1.0
    )
    at = dt.datetime(2026, 11, 29, tzinfo=dt.UTC)
    sweep = SweepState(
        id=7, started_at=at, finished_at=None, seconds=None, total=4, done=done, unreadable=0
    )
    return FleetStatusAnswered(
        fleet=counts,
        groups=(),
        drifted_by_kind={},
        sweep=sweep,
        sweep_running=running,
        last_finished_sweep=None,
    )


def test_while_the_inventory_sweeps_its_progress_is_reported() -> None:
    """``fleet sweep`` waits for the inventory's answer; meanwhile the running sweep's
    done/total (``fleet.status``) feeds the bar, until the answer comes."""
    seen: list[tuple[int, int]] = []
    finished = threading.Event()
    polls = iter(range(1, 100))

    def status() -> FleetStatusAnswered:
        done = next(polls)
        if done >= 3:
            finished.set()  # the inventory answers once three nodes are read
        return status_at(min(done, 4))

    def work() -> str:
        assert finished.wait(timeout=30)
        return "the sweep"

    assert while_sweeping(work, status, lambda d, t: seen.append((d, t))) == "the sweep"
    assert seen[:3] == [(1, 4), (2, 4), (3, 4)]


def test_what_the_wait_raised_is_raised_and_a_failing_status_stops_only_the_bar() -> None:
    polled = threading.Event()

    def status() -> FleetStatusAnswered:
        polled.set()
        raise SystemExit(3)  # ask's one-line exit: the status cannot be asked

    def refused() -> str:
        assert polled.wait(timeout=30)  # the bar tried (and gave up) while the inventory swept
        raise SystemExit(2)

    with pytest.raises(SystemExit) as exc:
        while_sweeping(refused, status, lambda d, t: None)
    assert exc.value.code == 2
    assert while_sweeping(lambda: "plain", status, None) == "plain"  # no bar: no thread
