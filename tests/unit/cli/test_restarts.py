"""The restart table of ``lockstep up``: backoff, recovery, and exits a restart cannot fix."""

from __future__ import annotations

import pytest

from lockstep_cli.restarts import RestartPolicy

pytestmark = pytest.mark.unit


def test_crashes_in_a_row_wait_longer_each_time_up_to_a_minute() -> None:
    policy = RestartPolicy()
    delays = []
    now = 0.0
    for _ in range(9):
        policy.started(now)
        now += 0.5  # dies half a second after each start
        delay = policy.delay_after(1, now)
        assert delay is not None
        delays.append(delay)
        now += delay
    assert delays == [1, 2, 4, 8, 16, 32, 60, 60, 60]


def test_a_service_that_ran_a_minute_counts_as_recovered() -> None:
    policy = RestartPolicy()
    policy.started(0.0)
    assert policy.delay_after(1, 1.0) == 1
    policy.started(2.0)
    assert policy.delay_after(1, 3.0) == 2
    policy.started(5.0)
    assert policy.delay_after(-9, 5.0 + 61) == 1  # killed after a stable minute: start over


@pytest.mark.parametrize("code", [2, 3])
def test_bad_settings_or_a_refused_self_check_are_not_restarted(code: int) -> None:
    assert RestartPolicy().delay_after(code, 10.0) is None
