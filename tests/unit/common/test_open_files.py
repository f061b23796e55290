"""The open-file limit a server raises for its sockets (``lockstep_common.open_files``): raised
to what the items need where the hard limit allows, else as many items as fit, never a crash."""

from __future__ import annotations

import resource

import pytest

from lockstep_common.open_files import HEADROOM, fitting, raise_fd_limit

pytestmark = pytest.mark.unit


class Limits:
    def __init__(self, soft: int, hard: int, *, privileged: bool = False) -> None:
        self.soft, self.hard, self.privileged = soft, hard, privileged

    def get(self, which: int) -> tuple[int, int]:
        assert which == resource.RLIMIT_NOFILE
        return self.soft, self.hard

    def set(self, which: int, value: tuple[int, int]) -> None:
        assert which == resource.RLIMIT_NOFILE
        if value[1] > self.hard and not self.privileged:
            raise ValueError("not allowed to raise the maximum limit")  # as the kernel says
        self.soft, self.hard = value


@pytest.fixture
def limits(monkeypatch: pytest.MonkeyPatch) -> Limits:
    limits = Limits(1024, 1024)
    monkeypatch.setattr(resource, "getrlimit", limits.get)
    monkeypatch.setattr(resource, "setrlimit", limits.set)
    return limits


def test_every_session_fits_once_the_soft_limit_is_raised(limits: Limits) -> None:
    limits.hard = 100_000
    assert fitting(2048, per_item=2) == 2048
    assert limits.soft == 2048 * 2 + HEADROOM


def test_under_a_low_hard_limit_as_many_as_fit_are_kept(limits: Limits) -> None:
    limits.hard = 1024
    assert fitting(2048, per_item=2) == (1024 - HEADROOM) // 2
    assert limits.soft == 1024  # left as it was


def test_a_soft_limit_already_high_enough_is_left_alone(limits: Limits) -> None:
    limits.soft = limits.hard = 50_000
    assert raise_fd_limit(4096) == 50_000


def test_a_need_over_the_hard_limit_is_refused_by_name(limits: Limits) -> None:
    with pytest.raises(RuntimeError, match="5000 file descriptors needed, hard limit is 1024"):
        raise_fd_limit(5000)
    assert (limits.soft, limits.hard) == (1024, 1024)


def test_a_process_that_may_raises_the_hard_limit_too(limits: Limits) -> None:
    limits.privileged = True  # root, or CAP_SYS_RESOURCE: a 12,500-node bench needs ~50,000
    assert raise_fd_limit(50_512) == 50_512
    assert (limits.soft, limits.hard) == (50_512, 50_512)
