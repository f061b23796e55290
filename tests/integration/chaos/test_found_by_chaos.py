"""Counterexamples the chaos state machine (``test_invariants_under_chaos``) found, or steered
to, kept as explicit regression tests on the same world."""

from __future__ import annotations

import pytest

from lockstep_cli.polling import until
from tests.integration.chaos.invariants import nothing_cordoned_without_reason, violations
from tests.integration.chaos.loop_thread import LoopThread
from tests.integration.chaos.world import World
from tests.speed import scaled

pytestmark = pytest.mark.integration


async def _draining(world: World) -> str:
    """Wait for a node whose work item is in ``draining`` (its cordon sent, maybe slowed)."""

    async def one() -> str | None:
        program = world.program
        assert program is not None
        seen = await world.observe()
        return next((n for n, (_, step, _) in seen.work.items() if step == "draining"), None)

    return await until(one, what="a node draining", timeout_s=scaled(30), poll_s=0.01)


async def _landed(world: World, before: int) -> None:
    """Wait until a slowed drain request took effect since ``before`` and none is waiting."""
    sched = world.rt.scheduler

    async def landed() -> bool:
        return sched.slowed_drains_done > before and sched.slowed_drains_waiting == 0

    await until(landed, what="the slowed drain to take effect", timeout_s=scaled(30))


def test_a_late_drain_of_a_worker_whose_lease_lapsed_is_not_left_behind(
    world: tuple[LoopThread, World],
) -> None:
    # Shrunk from the state machine: slow_scheduler(3.0) while a node is being cordoned, then
    # expire_leases. The first worker's drain takes effect 3 s later; meanwhile another worker
    # claims the item, drains, flashes and gives the node back. The late drain must not leave
    # the node cordoned by Lockstep with a work item that ended well.
    loop, w = world
    before = w.rt.scheduler.slowed_drains_done
    loop.call(w.rt.scheduler.slow_drains, 3.0, 1)
    program = loop.run(w.new_program())
    loop.call(w.rt.scheduler.slow_drains, 3.0, 1)
    loop.run(_draining(w))
    loop.run(w.expire_leases())
    loop.run(_landed(w, before))  # the late drain lands
    seen = loop.run(w.quiesce(abort=False), 90)
    found = violations(program, seen)
    assert nothing_cordoned_without_reason(seen) == [], seen.summary()
    assert found == [], found
