"""Maintenance windows as operators write them (issue 27, item 4): what is accepted, what each
refusal says, and the instants a weekly window opens and closes, daylight-saving included."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from lockstep_common.events.v1 import MaintenanceWindowsRequested
from lockstep_common.maintenance import MaintenanceError, parse_schedule

pytestmark = pytest.mark.unit


def test_a_weekend_night_in_berlin_opens_and_closes_at_its_wall_clock_times() -> None:
    s = parse_schedule(["SAT,Sun  22:00-06:00"], "Europe/Berlin")
    assert s.texts == ("sat,sun 22:00-06:00",)
    # 2026-03-28 is a Saturday; Berlin springs forward on Sunday 29 March at 02:00.
    spans = list(
        s.occurrences(datetime(2026, 3, 27, tzinfo=UTC), datetime(2026, 3, 31, tzinfo=UTC))
    )
    assert spans == [
        (datetime(2026, 3, 28, 21, tzinfo=UTC), datetime(2026, 3, 29, 4, tzinfo=UTC)),
        (datetime(2026, 3, 29, 20, tzinfo=UTC), datetime(2026, 3, 30, 4, tzinfo=UTC)),
    ]
    assert s.open_at(datetime(2026, 3, 28, 23, tzinfo=UTC))
    assert not s.open_at(datetime(2026, 3, 30, 4, tzinfo=UTC))  # closed at its end
    assert s.next_open(datetime(2026, 3, 30, 12, tzinfo=UTC)) == datetime(
        2026, 4, 4, 20, tzinfo=UTC
    )


def test_windows_that_only_touch_and_a_whole_day_are_accepted() -> None:
    assert parse_schedule(["sun 23:00-01:00", "mon 01:00-02:00"]).texts
    assert parse_schedule(["daily 00:00-24:00"]).open_at(datetime(2026, 5, 1, 13, tzinfo=UTC))
    assert len(parse_schedule(["fri-mon 22:00-23:00"]).windows) == 4  # fri, sat, sun, mon


@pytest.mark.parametrize(
    ("windows", "timezone", "says"),
    [
        (["sat 22:00-22:00"], "UTC", "never opens"),
        (["sat 22:00-06:00", "sun 05:00-07:00"], "UTC", "overlap"),
        (["sun 22:00-02:00", "mon 01:00-03:00"], "UTC", "overlap"),  # across the week's end
        (["daily 12:00-12:30", "wed 12:15-13:00"], "UTC", "overlap"),
        (["sat 25:00-06:00"], "UTC", "not a time of day"),
        (["sat 22:60-23:00"], "UTC", "not a time of day"),
        (["sat 24:00-02:00"], "UTC", "not a time of day"),
        (["sat 10pm-11pm"], "UTC", "expected DAYS HH:MM-HH:MM"),
        (["funday 01:00-02:00"], "UTC", "not a day"),
        (["sat,sat 01:00-02:00"], "UTC", "named twice"),
        (["sat 01:00-02:00", "SAT 01:00-02:00"], "UTC", "given twice"),
        (["sat 01:00-02:00"], "Mars/Olympus", "not an IANA time zone"),
        (["sat 01:00-02:00"], "../../etc/passwd", "not an IANA time zone"),
        (["sat 01:00-02:00"], "+02:00", "not an IANA time zone"),
        ([], "UTC", "at least one"),
    ],
)
def test_what_cannot_be_used_is_refused_in_one_line(
    windows: list[str], timezone: str, says: str
) -> None:
    with pytest.raises(MaintenanceError) as err:
        parse_schedule(windows, timezone)
    assert says in str(err.value)
    assert "\n" not in str(err.value)
    # The event refuses the same, so a hand-made request never reaches the planner's tables.
    if windows:
        with pytest.raises(ValidationError, match=says.split(maxsplit=1)[0]):
            MaintenanceWindowsRequested(
                scope="pool", name="p0", timezone=timezone, windows=tuple(windows), requested_by="x"
            )


def test_no_windows_in_an_event_means_no_restriction() -> None:
    data = MaintenanceWindowsRequested(scope="site", name="iad1", windows=None, requested_by="x")
    assert data.windows is None and data.timezone == "UTC"
