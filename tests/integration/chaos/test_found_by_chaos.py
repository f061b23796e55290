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


async def _on_the_wire(world: World) -> str:
    """Wait for the slowed cordon to reach the scheduler; the node it is for (its item
    draining, no drain on it yet)."""
    sched = world.rt.scheduler

    async def one() -> str | None:
        if not sched.slowed_drains_waiting:
            return None
        seen = await world.observe()
        waiting = [
            n
            for n, (_, step, _) in seen.work.items()
            if step == "draining" and sched.nodes[n].drain is None
        ]
        return waiting[0] if len(waiting) == 1 else None

    return await until(one, what="a cordon on the wire", timeout_s=scaled(30), poll_s=0.01)


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


def test_a_cordon_that_lands_after_its_item_ended_is_given_back(
    world: tuple[LoopThread, World],
) -> None:
    # Found by the state machine in CI ("node-00009: left drained by Lockstep at rest, work
    # item cancelled 'rollout halted: ...'"): the updater dies with its cordon request on the
    # wire, the rollout is aborted, the next updater ends the item cancelled with nothing of
    # Lockstep's to undo yet, and then the cordon lands. Nothing else would ever release that
    # node: the updater's reaper sweeps such drains back (``Executor.give_back_strays``).
    loop, w = world
    delay = scaled(4.0)  # longer than a kill, an abort and the next updater's ending take
    before = w.rt.scheduler.slowed_drains_done
    loop.call(w.rt.scheduler.slow_drains, delay, 1)
    program = loop.run(w.new_program())
    loop.call(w.rt.scheduler.slow_drains, delay, 1)
    node = loop.run(_on_the_wire(w))
    loop.run(w.kill("updater"))  # the cordon request keeps going in the scheduler
    assert loop.run(w.abort())

    async def halted() -> bool:
        return (await w.observe()).rollout_state == "aborted"

    loop.run(until(halted, what="the rollout halted", timeout_s=scaled(30)))
    # The dead worker's lease (2 s) still holds the item: the next updater learns of the halt
    # before it may claim the item, so its step gives the node back at once, without a cordon
    # of its own, while the dead worker's cordon is still on the wire.
    loop.run(w.restart("updater"))

    async def ended_before_the_cordon_landed() -> str | None:
        _, step, reason = (await w.observe()).work[node]
        return reason if step == "cancelled" else None

    reason = loop.run(
        until(ended_before_the_cordon_landed, what="the item cancelled", timeout_s=scaled(30))
    )
    assert reason.endswith("no drain of Lockstep's to undo"), reason
    loop.run(_landed(w, before))  # the late cordon lands on a node whose item ended
    seen = loop.run(w.quiesce(abort=False), 90)
    assert node not in seen.cordoned, seen.summary()
    assert violations(program, seen) == []
