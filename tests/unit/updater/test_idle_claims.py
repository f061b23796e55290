"""Idle claim loops share one database poll, and a released wave still reaches every loop
(``lockstep_updater.idle``, found by ``lockstep bench rollout``: 256 idle loops each polling
made most of the updater's CPU)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import cast

import pytest

from lockstep_cli.polling import until
from lockstep_common.service import Resources
from lockstep_redfish.image_server import ImageServer
from lockstep_updater.executor import Executor
from lockstep_updater.idle import FAN_OUT, IdleClaims
from lockstep_updater.settings import Settings
from lockstep_updater.worker import UpdaterWorker

pytestmark = pytest.mark.unit
LOOPS = 20


class FakeExecutor:
    """``step()`` claims one of ``items`` if any (calling ``on_claim`` as the executor does) and
    holds it until ``release`` is set; it records which loop (task) asked."""

    def __init__(self) -> None:
        self.items = 0
        self.running = 0
        self.askers: list[asyncio.Task[object] | None] = []
        self.release = asyncio.Event()
        self.on_claim: Callable[[], None] = lambda: None

    async def step(self) -> bool:
        self.askers.append(asyncio.current_task())
        if self.items == 0:
            return False
        self.items -= 1
        self.on_claim()
        self.running += 1
        await self.release.wait()
        return True


def unbuilt(resources: Resources, server: ImageServer | None) -> Executor:
    """The worker's executor factory, never called: the test hands its loop an executor."""
    raise AssertionError("the executor is the test's")


def worker(poll_s: float) -> UpdaterWorker:
    return UpdaterWorker(Settings(worker_poll_s=poll_s, workers=LOOPS), unbuilt)


async def test_idle_loops_leave_the_polling_to_one_of_them() -> None:
    w, fake, stopping = worker(0.005), FakeExecutor(), asyncio.Event()
    loops = [asyncio.create_task(w._loop(cast(Executor, fake), stopping)) for _ in range(LOOPS)]
    await until(lambda: _value(len(fake.askers) >= LOOPS + 30), "30 polls after the first claims")
    stopping.set()
    await asyncio.gather(*loops)
    # Every loop asked once; then a single loop polled, the others stayed parked.
    assert {id(t) for t in fake.askers[:LOOPS]} == {id(t) for t in loops}
    assert len({id(t) for t in fake.askers[LOOPS:-1]}) == 1
    assert w.idle.parked == 0  # the stop woke every parked loop


async def test_a_released_wave_reaches_every_parked_loop() -> None:
    w, fake, stopping = worker(0.01), FakeExecutor(), asyncio.Event()
    loops = [asyncio.create_task(w._loop(cast(Executor, fake), stopping)) for _ in range(LOOPS)]
    await until(lambda: _value(w.idle.parked == LOOPS - 1), "all loops idle, one polling")
    fake.items = LOOPS - 5  # a wave is released: the poller finds one, each claim wakes more
    await until(lambda: _value(fake.running == LOOPS - 5), "every item claimed at once")
    assert fake.items == 0
    stopping.set()
    fake.release.set()
    await asyncio.gather(*loops)


async def test_a_found_claim_wakes_fan_out_parked_loops_and_stop_wakes_all() -> None:
    idle, stopping = IdleClaims(poll_s=3600), asyncio.Event()
    waits = [asyncio.create_task(idle.wait(stopping)) for _ in range(2 + FAN_OUT)]
    await until(lambda: _value(idle.parked == 1 + FAN_OUT), "one polling, the rest parked")
    assert idle.polling
    idle.found()
    await until(lambda: _value(sum(t.done() for t in waits) == FAN_OUT), "the woken loops")
    assert idle.parked == 1
    stopping.set()
    await asyncio.gather(*waits)
    assert not idle.polling


async def _value(value: bool) -> bool:
    return value
