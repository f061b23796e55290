"""The dlq. copy of a dead letter: an id nobody can predict, and a body that always fits."""

from __future__ import annotations

import hashlib

import pytest

from lockstep_common import deadletter

pytestmark = pytest.mark.unit


def _letter(payload: bytes) -> deadletter.DeadLetter:
    return deadletter.DeadLetter(
        consumer="c",
        stream="LOCKSTEP_PINS",
        stream_seq=7,
        subject="pin.changed.iad1",
        payload=payload,
        reason="bad\nhash",
        error_kind="InvalidMessage",
        deliveries=1,
        detected_by="consumer",
    )


def test_the_copy_id_is_random_not_derived_from_the_stream_sequence() -> None:
    # A derived id could be published first by anyone, and JetStream would drop the real copy.
    first, second = (deadletter.copy_of(_letter(b"x")) for _ in range(2))
    assert first.event_id != second.event_id


def test_a_small_body_travels_whole_with_its_digest() -> None:
    copy = deadletter.copy_of(_letter(b"payload"))
    assert copy.payload == b"payload"
    assert copy.subject == "dlq.pin.changed.iad1"
    assert copy.headers is not None
    assert copy.headers[deadletter.DIGEST_HEADER] == hashlib.sha256(b"payload").hexdigest()
    assert deadletter.TRUNCATED_HEADER not in copy.headers
    assert copy.headers[deadletter.REASON_HEADER] == "bad hash"  # one header line


def test_a_large_body_is_cut_and_says_so() -> None:
    body = b"y" * (deadletter.COPY_BODY_LIMIT + 10)
    copy = deadletter.copy_of(_letter(body))
    assert copy.payload == body[: deadletter.COPY_BODY_LIMIT]
    assert copy.headers is not None
    assert copy.headers[deadletter.TRUNCATED_HEADER] == str(len(body))
    assert copy.headers[deadletter.DIGEST_HEADER] == hashlib.sha256(body).hexdigest()
