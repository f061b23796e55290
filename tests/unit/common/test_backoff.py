"""The shared exponential backoff: growth, cap, jitter bounds, long outages, bad settings."""

import random

import pytest

from lockstep_common.backoff import Backoff


def test_waits_double_from_the_base_up_to_the_cap() -> None:
    backoff = Backoff(0.5, 5.0)
    assert [backoff.delay(n) for n in range(6)] == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]


def test_a_long_outage_stays_at_the_cap_without_overflowing() -> None:
    assert Backoff(0.2, 10.0).delay(5000) == 10.0
    assert Backoff(1.0).delay(5000) == float("inf")  # uncapped: as long as it gets


def test_a_cap_below_the_base_is_the_wait_every_time() -> None:
    assert Backoff(0.2, 0.1).delay(0) == Backoff(0.2, 0.1).delay(7) == 0.1


def test_jitter_takes_at_most_its_fraction_off_each_wait() -> None:
    backoff = Backoff(1.0, 60.0, jitter=0.5, rng=random.Random(3))
    waits = [backoff.delay(3) for _ in range(200)]
    assert all(4.0 <= w <= 8.0 for w in waits)
    assert max(waits) - min(waits) > 2.0  # spread, not one value


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="base_s"):
        Backoff(-1.0)
    with pytest.raises(ValueError, match="factor"):
        Backoff(1.0, factor=0.5)
    with pytest.raises(ValueError, match="jitter"):
        Backoff(1.0, jitter=2.0)
    with pytest.raises(ValueError, match="attempt"):
        Backoff(1.0).delay(-1)
