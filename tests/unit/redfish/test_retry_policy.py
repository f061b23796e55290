"""Retry-After parsing and the retry delay (DSP0266 "HTTP status codes"; RFC 9110 §10.2.3)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from lockstep_redfish.transport import RetryPolicy, retry_after_seconds

pytestmark = pytest.mark.unit
NOW = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)


def test_retry_after_seconds_and_http_date() -> None:
    assert retry_after_seconds("3") == 3.0
    assert retry_after_seconds("Sat, 21 Nov 2026 12:00:05 GMT", NOW) == 5.0
    assert retry_after_seconds("Sat, 21 Nov 2026 11:00:00 GMT", NOW) == 0.0
    assert retry_after_seconds("soon") is None
    assert retry_after_seconds(None) is None


def test_delay_honours_retry_after_up_to_the_cap() -> None:
    policy = RetryPolicy(timeout_s=1, retries=2, backoff_s=0.1, max_retry_after_s=5)
    assert 0.05 <= policy.delay(0, None) <= 0.1
    assert 0.1 <= policy.delay(1, None) <= 0.2
    assert policy.delay(0, 2.0) == 2.0
    assert policy.delay(0, 600.0) == 5.0
