"""The ack policy: which errors are retried, which are dead-lettered, and how long to wait."""

from __future__ import annotations

import pytest

from lockstep_common.errors import (
    Disposition,
    InvalidMessage,
    PermanentError,
    TransientError,
    describe,
    disposition_for,
    error_kind,
    retry_delay,
)

pytestmark = pytest.mark.unit

MAX_DELIVER = 5
BACKOFF = (1.0, 5.0, 15.0, 60.0)


@pytest.mark.parametrize(
    ("error", "delivery", "expected"),
    [
        (None, 1, Disposition.ACK),
        (None, MAX_DELIVER, Disposition.ACK),
        (PermanentError("stack hash mismatch"), 1, Disposition.DEAD_LETTER),
        (PermanentError("stack hash mismatch"), MAX_DELIVER - 1, Disposition.DEAD_LETTER),
        (PermanentError("stack hash mismatch"), MAX_DELIVER, Disposition.DEAD_LETTER),
        (InvalidMessage("not JSON"), 1, Disposition.DEAD_LETTER),
        (InvalidMessage("not JSON"), MAX_DELIVER, Disposition.DEAD_LETTER),
        (TransientError("BMC timed out"), 1, Disposition.RETRY),
        (TransientError("BMC timed out"), MAX_DELIVER - 1, Disposition.RETRY),
        (TransientError("BMC timed out"), MAX_DELIVER, Disposition.DEAD_LETTER),
        (KeyError("a bug"), 1, Disposition.RETRY),
        (KeyError("a bug"), MAX_DELIVER - 1, Disposition.RETRY),
        (KeyError("a bug"), MAX_DELIVER, Disposition.DEAD_LETTER),
        (TransientError("redelivered past the limit"), MAX_DELIVER + 1, Disposition.DEAD_LETTER),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException | None) else str(v),
)
def test_disposition_for(error: BaseException | None, delivery: int, expected: Disposition) -> None:
    assert disposition_for(error, delivery=delivery, max_deliver=MAX_DELIVER) is expected


def test_a_bug_is_retried_so_a_deployed_fix_can_still_process_the_message() -> None:
    dispositions = [
        disposition_for(ZeroDivisionError(), delivery=d, max_deliver=3) for d in (1, 2, 3)
    ]

    assert dispositions == [Disposition.RETRY, Disposition.RETRY, Disposition.DEAD_LETTER]


@pytest.mark.parametrize(
    ("delivery", "expected"),
    [(1, 1.0), (2, 5.0), (3, 15.0), (4, 60.0), (5, 60.0), (100, 60.0)],
)
def test_retry_delay_follows_the_backoff_and_sticks_at_its_last_entry(
    delivery: int, expected: float
) -> None:
    assert retry_delay(delivery, BACKOFF) == expected


@pytest.mark.parametrize("delivery", [1, 2, 10])
def test_retry_delay_without_backoff_is_zero(delivery: int) -> None:
    assert retry_delay(delivery, ()) == 0.0


def test_error_kind_is_the_class_name() -> None:
    assert error_kind(InvalidMessage("x")) == "InvalidMessage"
    assert error_kind(KeyError("x")) == "KeyError"


def test_lockstep_errors_print_their_message_and_keep_their_context() -> None:
    error = TransientError("BMC at 10.0.0.7 timed out", node_id="gb200-r07-n03", attempt=2)

    assert str(error) == "BMC at 10.0.0.7 timed out"
    assert error.context == {"node_id": "gb200-r07-n03", "attempt": 2}


class _DatabaseError(Exception):
    """Stands for an asyncpg error: they carry the server's SQLSTATE as ``sqlstate``."""

    def __init__(self, sqlstate: str) -> None:
        super().__init__(sqlstate)
        self.sqlstate = sqlstate


@pytest.mark.parametrize(
    ("sqlstate", "expected"),
    [
        ("22021", Disposition.DEAD_LETTER),  # character not in repertoire: a NUL byte in text
        ("22003", Disposition.DEAD_LETTER),  # numeric value out of range
        ("23514", Disposition.DEAD_LETTER),  # check violation
        ("23502", Disposition.DEAD_LETTER),  # not-null violation
        ("23505", Disposition.DEAD_LETTER),  # unique violation: an id already taken
        ("23503", Disposition.RETRY),  # foreign key: maybe an event that arrived early
        ("40001", Disposition.RETRY),  # serialization failure: a retry may well succeed
        ("57P01", Disposition.RETRY),  # admin shutdown (the server is restarting)
        ("08006", Disposition.RETRY),  # connection failure
    ],
)
def test_database_errors_a_retry_would_repeat_are_dead_lettered_at_once(
    sqlstate: str, expected: Disposition
) -> None:
    error = _DatabaseError(sqlstate)
    assert disposition_for(error, delivery=1, max_deliver=MAX_DELIVER) is expected


@pytest.mark.parametrize(
    ("error", "text"),
    [
        (TimeoutError(), "TimeoutError"),
        (ConnectionResetError(), "ConnectionResetError"),
        (TransientError("BMC timed out"), "BMC timed out"),
    ],
)
def test_an_error_is_never_described_by_an_empty_string(error: BaseException, text: str) -> None:
    assert describe(error) == text
