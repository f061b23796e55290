"""The shared periodic loop: rounds, waits, errors, stopping and cancelling, without sleeping."""

import asyncio
import logging
import random

import pytest

from lockstep_common.periodic import Every


class Rounds:
    """A ``pause`` that records each wait and stops the loop after ``limit`` waits."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.waits: list[float] = []

    async def __call__(self, stopping: asyncio.Event, seconds: float) -> None:
        self.waits.append(seconds)
        if len(self.waits) >= self.limit:
            stopping.set()


async def test_work_runs_then_waits_the_interval_until_stopped() -> None:
    rounds, calls = Rounds(3), []

    async def work() -> None:
        calls.append(len(rounds.waits))

    await Every(30.0, pause=rounds).run(work, asyncio.Event())
    assert calls == [0, 1, 2]  # a round before each wait; none once stopped
    assert rounds.waits == [30.0, 30.0, 30.0]


async def test_wait_first_waits_before_the_first_round() -> None:
    rounds, calls = Rounds(2), []

    async def work() -> None:
        calls.append(len(rounds.waits))

    await Every(5.0, wait_first=True, pause=rounds).run(work, asyncio.Event())
    assert calls == [1]


async def test_a_round_that_finds_more_runs_again_without_waiting() -> None:
    rounds, queue = Rounds(1), [1, 2, 3]

    async def work() -> bool:
        if not queue:
            return False
        queue.pop()
        return True

    await Every(5.0, pause=rounds).run(work, asyncio.Event())
    assert queue == []
    assert rounds.waits == [5.0]  # one wait: after the queue ran dry


async def test_an_error_is_logged_and_the_loop_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    rounds, calls = Rounds(3), []

    async def work() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise OSError("database away")
        if len(calls) == 2:
            raise KeyError("bug")

    every = Every(2.0, what="reaper", expected=(OSError,), pause=rounds)
    with caplog.at_level(logging.WARNING):
        await every.run(work, asyncio.Event())
    assert len(calls) == 3
    expected, unexpected = caplog.records[0], caplog.records[1]
    assert expected.getMessage() == "reaper failed (next in 2s): database away"
    assert expected.exc_info is None  # an expected outage is one line
    assert unexpected.exc_info is not None  # a bug keeps its traceback


async def test_jitter_draws_each_wait_below_the_interval() -> None:
    rounds = Rounds(50)

    async def work() -> None:
        return None

    every = Every(10.0, jitter=0.2, pause=rounds, rng=random.Random(7))
    await every.run(work, asyncio.Event())
    assert all(8.0 <= w <= 10.0 for w in rounds.waits)
    assert len(set(rounds.waits)) > 1


async def test_the_real_wait_ends_when_stopping_is_set() -> None:
    stopping, started = asyncio.Event(), asyncio.Event()

    async def work() -> None:
        started.set()

    task = asyncio.create_task(Every(3600.0).run(work, stopping))
    await started.wait()
    stopping.set()
    await asyncio.wait_for(task, timeout=30)  # an hour's interval, yet it ends on the stop


async def test_cancelling_ends_the_loop() -> None:
    started = asyncio.Event()

    async def work() -> None:
        started.set()
        await asyncio.Event().wait()  # a round that never returns

    task = asyncio.create_task(Every(1.0).run(work, asyncio.Event()))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="jitter"):
        Every(1.0, jitter=1.5)
    with pytest.raises(ValueError, match="interval_s"):
        Every(-1.0)
