"""JSON log lines: one object per record, with the standard keys and the caller's extras."""

from __future__ import annotations

import io
import json
import logging
import uuid
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from lockstep_common.observability import JsonFormatter

pytestmark = pytest.mark.unit


@pytest.fixture
def captured() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    """A private logger whose records are written by JsonFormatter into a buffer."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger(f"lockstep.unittest.{uuid.uuid4().hex}")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    yield logger, stream
    logger.removeHandler(handler)


def _fail() -> None:
    raise ValueError("boom")


def _lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_record_is_one_json_object_with_time_level_logger_and_message(
    captured: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = captured

    logger.warning("sweep of %s took %d s", "iad1", 42)

    [line] = _lines(stream)
    assert set(line) == {"time", "level", "logger", "message"}
    assert line["level"] == "warning"
    assert line["logger"] == logger.name
    assert line["message"] == "sweep of iad1 took 42 s"
    assert datetime.fromisoformat(line["time"]).utcoffset() is not None


def test_extra_fields_become_keys_of_the_object(
    captured: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = captured
    event_id = uuid.UUID(int=5)

    logger.info("dead-lettered", extra={"node_id": "gb200-r07-n03", "delivery": 5, "id": event_id})

    [line] = _lines(stream)
    assert line["node_id"] == "gb200-r07-n03"
    assert line["delivery"] == 5
    assert line["id"] == str(event_id)  # not JSON-native: rendered as text, not an error


def test_an_exception_stays_on_one_line_with_its_traceback(
    captured: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = captured

    try:
        _fail()
    except ValueError:
        logger.exception("handler failed")

    assert stream.getvalue().count("\n") == 1
    [line] = _lines(stream)
    assert line["message"] == "handler failed"
    assert line["level"] == "error"
    assert "Traceback" in line["exception"]
    assert "ValueError: boom" in line["exception"]


def test_time_is_utc_iso8601_with_milliseconds() -> None:
    record = logging.makeLogRecord(
        {"name": "lockstep.x", "levelname": "INFO", "msg": "hi", "created": 1_700_000_000.25}
    )

    line = json.loads(JsonFormatter().format(record))

    assert line["time"] == "2023-11-14T22:13:20.250+00:00"
