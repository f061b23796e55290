"""A drain of Lockstep's that took effect after its work item ended (a worker killed with its
cordon request on the wire; found by the chaos test: "node-00009: left drained by Lockstep at
rest, work item cancelled") is given back by the reaper's sweep, and only such a drain: a node
whose item is still under way, or whose latest item ended quarantined, keeps its drain."""

from __future__ import annotations

from typing import Any, cast

import pytest

from lockstep_updater.domain.drains import DrainState
from lockstep_updater.domain.steps import NodeStep
from lockstep_updater.executor import Executor
from lockstep_updater.testing.memory_store import MemoryStore
from tests.unit.updater.test_handlers import deliver, plan, wave

pytestmark = pytest.mark.unit
S = NodeStep


class ListingScheduler:
    """A scheduler that holds Lockstep's drain on ``drained`` and can list them."""

    def __init__(self, *drained: str) -> None:
        self.drained = set(drained)
        self.resumed: list[str] = []

    async def own_drains(self) -> list[str]:
        return sorted(self.drained)

    async def cordon(self, node_id: str, reason: str) -> None:
        self.drained.add(node_id)

    async def drain_state(self, node_id: str) -> DrainState:
        return DrainState.DRAINED if node_id in self.drained else DrainState.NOT_DRAINED

    async def resume(self, node_id: str) -> bool:
        if node_id not in self.drained:
            return False
        self.drained.discard(node_id)
        self.resumed.append(node_id)
        return True


class NonListingScheduler(ListingScheduler):
    own_drains = None  # type: ignore[assignment]


async def fleet(states: dict[str, NodeStep]) -> MemoryStore:
    store = MemoryStore()
    await deliver(store, plan(tuple(states)))
    await deliver(store, wave(0, *states))
    for item in store.items:
        item.state = states[item.node_id]
    return store


def executor(store: MemoryStore, scheduler: ListingScheduler) -> Executor:
    # The sweep reads the store and the scheduler only: no BMC, fleet or images reached.
    return Executor(store, cast(Any, None), scheduler, cast(Any, None))


async def test_a_drain_no_item_holds_is_given_back_and_the_others_are_kept() -> None:
    store = await fleet(
        {
            "n-cancelled": S.CANCELLED,  # its cordon landed after the item ended
            "n-done": S.DONE,
            "n-failed": S.FAILED,
            "n-draining": S.DRAINING,  # its own item holds the drain
            "n-pending": S.PENDING,  # may cordon at any moment: not ours to judge
            "n-quarantined": S.QUARANTINED,  # kept cordoned by design
        }
    )
    scheduler = ListingScheduler(*(item.node_id for item in store.items))
    given = await executor(store, scheduler).give_back_strays()
    assert given == ["n-cancelled", "n-done", "n-failed"]
    assert scheduler.drained == {"n-draining", "n-pending", "n-quarantined"}
    # A second sweep finds nothing more to give back.
    assert await executor(store, scheduler).give_back_strays() == []


async def test_a_latest_item_ended_quarantined_keeps_the_drain_whatever_came_before() -> None:
    store = await fleet({"n1": S.CANCELLED})
    later = {"rollout_id": "r-2"}
    await deliver(store, plan(("n1",)).model_copy(update=later))
    await deliver(store, wave(0, "n1").model_copy(update=later))
    store.items[-1].state = S.QUARANTINED
    scheduler = ListingScheduler("n1")
    assert await executor(store, scheduler).give_back_strays() == []
    assert scheduler.drained == {"n1"}


async def test_a_scheduler_that_cannot_list_its_drains_is_not_swept() -> None:
    store = await fleet({"n1": S.CANCELLED})
    scheduler = NonListingScheduler("n1")
    assert await executor(store, scheduler).give_back_strays() == []
    assert scheduler.drained == {"n1"}
