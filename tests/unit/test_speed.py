"""The measured slowdown that stretches the integration tests' deadlines (tests/speed.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests import speed


@pytest.fixture(autouse=True)
def fresh() -> Iterator[None]:
    speed.slowdown.cache_clear()
    yield
    speed.slowdown.cache_clear()


def test_a_runner_known_to_be_slow_sets_the_factor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCKSTEP_TEST_SLOWDOWN", "2.5")
    assert speed.slowdown() == 2.5
    assert speed.scaled(30) == 75


def test_deadlines_never_shrink_on_a_fast_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCKSTEP_TEST_SLOWDOWN", "0.5")
    assert speed.scaled(30) == 30
    monkeypatch.delenv("LOCKSTEP_TEST_SLOWDOWN")
    monkeypatch.setattr(speed, "_workload", lambda: speed.REFERENCE_S / 3)
    assert speed.slowdown() == 1.0


def test_the_factor_is_the_measured_time_over_the_reference(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("LOCKSTEP_TEST_SLOWDOWN", raising=False)
    monkeypatch.setattr(speed, "_workload", lambda: speed.REFERENCE_S * 2)
    assert speed.slowdown() == pytest.approx(2.0)


def test_a_bad_override_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCKSTEP_TEST_SLOWDOWN", "-1")
    with pytest.raises(ValueError, match="LOCKSTEP_TEST_SLOWDOWN must be > 0"):
        speed.slowdown()
