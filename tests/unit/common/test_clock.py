from datetime import UTC, datetime, timedelta

import pytest

from lockstep_common.clock import SYSTEM_CLOCK, ManualClock


def test_manual_clock_moves_only_when_advanced() -> None:
    start = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    clock = ManualClock(start)
    assert clock.now() == start
    clock.advance(90)
    assert clock.now() == start + timedelta(seconds=90)
    assert clock.monotonic() == 90


def test_manual_clock_refuses_to_go_backwards_or_to_be_naive() -> None:
    with pytest.raises(ValueError, match="backwards"):
        ManualClock().advance(-1)
    with pytest.raises(ValueError, match="timezone-aware"):
        ManualClock(datetime(2026, 1, 1))  # noqa: DTZ001 - the naive start is the point


def test_system_clock_is_aware_utc() -> None:
    assert SYSTEM_CLOCK.now().tzinfo is UTC
