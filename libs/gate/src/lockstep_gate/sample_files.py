"""Recorded health samples (JSON or CSV) for offline replay: ``lockstep gate evaluate``.

One row per reading: ``node``, ``group`` (canary or control), ``metric``, ``value``, ``time``
(seconds since the epoch, or ISO 8601 with a zone), and optionally ``stratum`` (default ``all``)
and ``phase`` (``soak``, the default, or ``baseline``). A missing value is an empty CSV cell, JSON
``null``, ``NaN`` or an infinity; the policy's rule for that metric decides what it becomes.

JSON is a list of objects with those keys; CSV has a header row naming them.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterator, Mapping
from datetime import datetime
from pathlib import Path

from lockstep_gate.samples import (
    DEFAULT_STRATUM,
    Group,
    Phase,
    Sample,
    SampleError,
    SampleTable,
)

REQUIRED = ("node", "group", "metric", "value", "time")
OPTIONAL = ("stratum", "phase")


class SampleFileError(ValueError):
    """The file cannot be used; the message is one line naming the file and what is wrong."""


def _number(raw: object, what: str, *, missing_ok: bool) -> float:
    if raw is None or (isinstance(raw, str) and raw.strip() == ""):
        if missing_ok:
            return math.nan
        raise SampleError(f"{what} is missing")
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        raise SampleError(f"{what} {raw!r} is not a number")
    try:
        return float(raw)
    except ValueError:
        raise SampleError(f"{what} {raw!r} is not a number") from None


def _iso(text: str) -> float:
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise SampleError(f"time {text!r} is neither seconds nor ISO 8601") from None
    if when.tzinfo is None:
        raise SampleError(f"time {text!r} has no time zone")
    return when.timestamp()


def _time(raw: object) -> float:
    if isinstance(raw, str):
        try:
            value = float(raw)
        except ValueError:
            return _iso(raw)
    else:
        value = _number(raw, "time", missing_ok=False)
    if not math.isfinite(value):
        raise SampleError(f"time {raw!r} is not finite")
    return value


def _text(raw: object, what: str) -> str:
    if not isinstance(raw, str):
        raise SampleError(f"{what} must be text, not {raw!r}")
    return raw.strip()


def _sample(fields: Mapping[str, object]) -> Sample:
    unknown = sorted(set(fields) - set(REQUIRED) - set(OPTIONAL))
    if unknown:
        raise SampleError(f"unknown field(s) {', '.join(unknown)}")
    absent = [k for k in REQUIRED if k not in fields]
    if absent:
        raise SampleError(f"missing field(s) {', '.join(absent)}")
    group = _text(fields["group"], "group")
    if group not in set(Group):
        raise SampleError(f"group {group!r} is neither canary nor control")
    phase = _text(fields.get("phase") or Phase.SOAK, "phase")
    if phase not in set(Phase):
        raise SampleError(f"phase {phase!r} is neither soak nor baseline")
    return Sample(
        node=_text(fields["node"], "node"),
        group=Group(group),
        metric=_text(fields["metric"], "metric"),
        value=_number(fields["value"], "value", missing_ok=True),
        time=_time(fields["time"]),
        stratum=_text(fields.get("stratum") or DEFAULT_STRATUM, "stratum"),
        phase=Phase(phase),
    )


def _json_rows(text: str) -> Iterator[tuple[str, Mapping[str, object]]]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SampleError(f"not valid JSON: {exc}") from None
    if not isinstance(data, list):
        raise SampleError("JSON samples must be a list of objects")
    for i, item in enumerate(data, start=1):
        if not isinstance(item, dict):
            raise SampleError(f"sample {i}: not an object")
        yield f"sample {i}", item


def _csv_rows(text: str) -> Iterator[tuple[str, Mapping[str, object]]]:
    reader = csv.DictReader(io.StringIO(text, newline=""))
    if not reader.fieldnames:
        raise SampleError("the CSV file has no header row")
    for row in reader:
        if None in row:
            raise SampleError(f"line {reader.line_num}: more cells than header columns")
        yield f"line {reader.line_num}", {k: v for k, v in row.items() if v is not None}


def parse_samples(text: str, *, json_format: bool) -> SampleTable:
    """The table of a JSON or CSV document; :class:`SampleError` names the row at fault."""
    rows = _json_rows(text) if json_format else _csv_rows(text)
    samples, places = [], []
    for where, fields in rows:
        try:
            samples.append(_sample(fields))
        except SampleError as exc:
            raise SampleError(f"{where}: {exc}") from None
        places.append(where)
    if not samples:
        raise SampleError("no samples")
    return SampleTable.from_rows(samples, places=places)


def read_samples(path: Path) -> SampleTable:
    """Samples from a file: JSON for ``.json`` (or a document starting with ``[``), else CSV."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise SampleFileError(f"samples {path}: cannot be read: {reason}") from None
    json_format = path.suffix.lower() == ".json" or text.lstrip().startswith("[")
    try:
        return parse_samples(text, json_format=json_format)
    except SampleError as exc:
        raise SampleFileError(f"samples {path}: {exc}") from None
