"""Maintenance windows as an operator declares them: weekly, in a named time zone (issue 27,
item 4). Pure, shared by the CLI (checks what is typed), the planner (plans outages inside
them) and the updater (starts no node's work outside them).

A window is written ``DAYS HH:MM-HH:MM``: ``DAYS`` is ``daily``, a day (``sat``), a range
(``mon-fri``) or a comma list of those (``sat,sun``), in English three-letter names; the times
are a 24-hour wall clock in the schedule's time zone (an IANA name, the tz database's, e.g.
``Europe/Berlin``; default ``UTC``), ``24:00`` allowed as an end. An end at or before the start
runs into the next day (``fri 22:00-06:00`` ends on Saturday at 06:00). A window opens on each
of its days at its start. Wall-clock times are turned into instants by ``zoneinfo`` (PEP 615):
across a daylight-saving change a window keeps its wall-clock start and end, so it is an hour
shorter or longer that night; a start inside the spring-forward gap opens at the hour after.

Refused, each with one line naming the window: a malformed day, time or time zone; a window of
no length (it would never open); two windows (or two days of one) that overlap, since which
one an operator meant is then unclear. Windows that only touch are allowed.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

__all__ = ["MaintenanceError", "Schedule", "WeeklyWindow", "parse_schedule"]

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
WEEK_MIN = 7 * 24 * 60
MAX_WINDOWS = 64
_WINDOW = re.compile(r"^(?P<days>[a-z,\-]+)\s+(?P<start>\d{1,2}:\d{2})-(?P<end>\d{1,2}:\d{2})$")


class MaintenanceError(ValueError):
    """A schedule that cannot be used; the message is one line naming what is wrong."""


@dataclass(frozen=True, slots=True)
class WeeklyWindow:
    """One window on one weekday: opens at ``start`` minutes after that day's midnight (wall
    clock) and lasts ``length`` minutes."""

    day: int
    """0 = Monday (``date.weekday()``)."""
    start: int
    length: int

    @property
    def span(self) -> tuple[int, int]:
        """Minutes of the week it covers, ``[begin, end)``, the end past the week's when it
        runs into Monday."""
        begin = self.day * 24 * 60 + self.start
        return begin, begin + self.length


@dataclass(frozen=True, slots=True)
class Schedule:
    """A pool's or a site's maintenance windows: ``texts`` as declared (normalised), and the
    weekly windows they make."""

    timezone: str
    texts: tuple[str, ...]
    windows: tuple[WeeklyWindow, ...]

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    def occurrences(self, start: datetime, end: datetime) -> Iterator[tuple[datetime, datetime]]:
        """Every window opening before ``end`` and closing after ``start``, as UTC instants
        ``[open, close)``, in order of opening."""
        zone = self.zone
        first = start.astimezone(zone).date() - timedelta(days=8)  # longest window: a week
        last = end.astimezone(zone).date()
        out = []
        day = first
        while day <= last:
            for w in self.windows:
                if w.day != day.weekday():
                    continue
                opens = _instant(day, w.start, zone)
                closes = _instant(day, w.start + w.length, zone)
                if opens < end and closes > start and closes > opens:
                    out.append((opens, closes))
            day += timedelta(days=1)
        yield from sorted(out)

    def open_at(self, at: datetime) -> bool:
        """True when a window is open at ``at``."""
        return any(True for _ in self.occurrences(at, at + timedelta(microseconds=1)))

    def next_open(self, at: datetime) -> datetime | None:
        """When the next window opens after ``at`` (within two weeks), None when none does."""
        for opens, _ in self.occurrences(at, at + timedelta(days=15)):
            if opens > at:
                return opens
        return None


def _instant(day: date, minutes: int, zone: ZoneInfo) -> datetime:
    """The UTC instant of wall-clock ``minutes`` after ``day``'s midnight in ``zone`` (past
    24:00 runs into the following days)."""
    days, rest = divmod(minutes, 24 * 60)
    local = datetime.combine(day + timedelta(days=days), time(rest // 60, rest % 60), zone)
    # A wall-clock time in a spring-forward gap does not exist: round trip through UTC moves
    # it past the gap (fold=0 reads it with the offset before the change).
    return local.astimezone(UTC)


def _minutes(text: str, window: str, *, end: bool) -> int:
    hours, _, mins = text.partition(":")
    h, m = int(hours), int(mins)
    if m > 59 or h > 24 or (h == 24 and (m or not end)):
        raise MaintenanceError(f"window {window!r}: {text} is not a time of day (00:00-23:59)")
    return h * 60 + m


def _days(text: str, window: str) -> list[int]:
    if text == "daily":
        return list(range(7))
    out: list[int] = []
    for part in text.split(","):
        first, _, last = part.partition("-")
        if first not in DAYS or (last and last not in DAYS):
            raise MaintenanceError(
                f"window {window!r}: {part!r} is not a day or a range of days "
                f"({', '.join(DAYS)}, daily)"
            )
        a, b = DAYS.index(first), DAYS.index(last or first)
        out.extend(range(a, b + 1) if a <= b else [*range(a, 7), *range(0, b + 1)])
    return out


def _window(text: str) -> tuple[str, list[WeeklyWindow]]:
    normal = " ".join(text.strip().lower().split())
    match = _WINDOW.match(normal)
    if match is None:
        raise MaintenanceError(
            f"window {text!r}: expected DAYS HH:MM-HH:MM (for example 'sat,sun 22:00-06:00')"
        )
    start = _minutes(match["start"], text, end=False)
    end = _minutes(match["end"], text, end=True)
    if start == end:
        raise MaintenanceError(
            f"window {text!r}: it starts and ends at the same time, so it never opens"
        )
    length = end - start if end > start else end + 24 * 60 - start
    days = _days(match["days"], text)
    if len(set(days)) != len(days):
        raise MaintenanceError(f"window {text!r}: a day is named twice")
    return normal, [WeeklyWindow(d, start, length) for d in days]


def _overlap(windows: Sequence[tuple[str, WeeklyWindow]]) -> None:
    """Refuse two windows covering the same minute of the week (the week wraps)."""
    spans = sorted(
        (begin % WEEK_MIN, begin % WEEK_MIN + (end - begin), text)
        for text, w in windows
        for begin, end in [w.span]
    )
    # One more lap so a window running past Sunday midnight meets Monday's.
    lapped = spans + [(b + WEEK_MIN, e + WEEK_MIN, t) for b, e, t in spans]
    for (b1, e1, t1), (b2, _, t2) in itertools.pairwise(lapped):
        if b2 < e1 and b2 - b1 < WEEK_MIN:
            if t1 == t2:
                raise MaintenanceError(f"window {t1!r}: its days overlap one another")
            raise MaintenanceError(f"windows {t1!r} and {t2!r} overlap")


def parse_schedule(windows: Iterable[str], timezone: str = "UTC") -> Schedule:
    """The schedule ``windows`` declare in ``timezone``.

    Raises:
        MaintenanceError: what is wrong, in one line.
    """
    texts = list(windows)
    if not texts:
        raise MaintenanceError("no window given: a schedule needs at least one")
    if len(texts) > MAX_WINDOWS:
        raise MaintenanceError(f"{len(texts)} windows: at most {MAX_WINDOWS}")
    try:
        ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise MaintenanceError(
            f"time zone {timezone!r} is not an IANA time zone name (for example Europe/Berlin)"
        ) from None
    made: list[tuple[str, WeeklyWindow]] = []
    normal: list[str] = []
    for text in texts:
        name, weekly = _window(text)
        if name in normal:
            raise MaintenanceError(f"window {text!r} is given twice")
        normal.append(name)
        made.extend((name, w) for w in weekly)
    _overlap(made)
    return Schedule(timezone, tuple(normal), tuple(w for _, w in made))
