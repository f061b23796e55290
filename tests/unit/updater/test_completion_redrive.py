"""The updater re-drives a ``wave.completed`` nobody acted on (reliability.md 7, A4: the broker
acknowledged it and then lost it): the same event published again until the planner releases
a later wave of the rollout or the rollout halts, at doubling intervals, a bounded number of
times."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any, cast

import pytest

from lockstep_common.events.v1 import RolloutHalted
from lockstep_updater.domain.steps import NodeStep
from lockstep_updater.executor import Executor
from lockstep_updater.testing.memory_store import MemoryStore
from tests.unit.updater.test_handlers import ROLLOUT, deliver, plan, wave

pytestmark = pytest.mark.unit
AFTER_S = 60.0
EVENT = uuid.UUID(int=7)


async def completed(store: MemoryStore) -> Executor:
    """Wave 0 of a two-wave plan finished on both its nodes, its wave.completed emitted."""
    await deliver(store, plan(("n1", "n2"), ("n3",)))
    await deliver(store, wave(0, "n1", "n2"))
    for item in store.items:
        item.state = NodeStep.DONE
    async with store.transaction() as tx:
        assert await tx.complete_wave(ROLLOUT, 0) is not None
        await tx.completion_sent(ROLLOUT, 0, EVENT)
    # The re-drive uses the store alone: no BMC, scheduler or fleet is reached.
    return Executor(store, cast(Any, None), cast(Any, None), cast(Any, None))


def later(store: MemoryStore, seconds: float) -> None:
    store.now += timedelta(seconds=seconds)


def republished(store: MemoryStore) -> list[tuple[uuid.UUID, str]]:
    return list(store._tables.republished)


async def test_an_unanswered_completion_is_sent_again_at_doubling_intervals_up_to_the_cap() -> None:
    store = MemoryStore()
    executor = await completed(store)
    later(store, AFTER_S - 1)
    assert await executor.redrive_completions(AFTER_S, max_redrives=3) == 0
    later(store, 1)
    assert await executor.redrive_completions(AFTER_S, max_redrives=3) == 1
    assert republished(store) == [(EVENT, "redrive-1")]
    later(store, 2 * AFTER_S - 1)  # the next one waits twice as long
    assert await executor.redrive_completions(AFTER_S, max_redrives=3) == 0
    later(store, 1)
    assert await executor.redrive_completions(AFTER_S, max_redrives=3) == 1
    later(store, 4 * AFTER_S)
    assert await executor.redrive_completions(AFTER_S, max_redrives=3) == 1
    later(store, 100 * AFTER_S)  # the cap: the last wave of a rollout has nothing to end them
    assert await executor.redrive_completions(AFTER_S, max_redrives=3) == 0
    assert [tag for _, tag in republished(store)] == ["redrive-1", "redrive-2", "redrive-3"]
    assert not store.events.emitted  # the copies are the committed event, nothing new


async def test_the_next_wave_released_or_a_halt_means_the_completion_arrived() -> None:
    store = MemoryStore()
    executor = await completed(store)
    await deliver(store, wave(1, "n3"))  # the planner acted on it
    later(store, 10 * AFTER_S)
    assert await executor.redrive_completions(AFTER_S, max_redrives=3) == 0

    halted = MemoryStore()
    executor = await completed(halted)
    await deliver(
        halted, RolloutHalted(rollout_id=ROLLOUT, wave=0, reason="abort", halted_by="alice")
    )
    later(halted, 10 * AFTER_S)
    assert await executor.redrive_completions(AFTER_S, max_redrives=3) == 0
    assert republished(halted) == []
