"""Never twice: the updater killed at every point where it writes its state (so also between
the push being accepted and it being recorded, while the task runs, after the drain, after
the activation before verify) and restarted; the BMC ledger shows exactly one accepted push per
node and version, the node ends verified, and no drain of Lockstep's is left behind."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from lockstep_updater.domain.steps import NodeStep
from lockstep_updater.ports import OWNER
from lockstep_updater.testing.memory_store import MemoryStore, MemoryTx
from tests.integration.sim.pldm_fixtures import NEW_GPU_VERSION
from tests.integration.updater.conftest import FAST, World
from tests.integration.updater.test_executor_sim import nodes_of, plan_and_release

pytestmark = pytest.mark.integration
WRITES = ("advance", "save_progress")


class Killed(BaseException):
    """The process died: nothing after this point ran (a BaseException, as a SIGKILL is not
    something the executor could catch)."""


class KillingStore:
    """The memory store, dying inside its ``at``-th write (that transaction never commits),
    or with ``committed``, right after the transaction holding it committed."""

    def __init__(self, store: MemoryStore, at: int, *, committed: bool = False) -> None:
        self.store, self.at, self.writes, self.committed = store, at, 0, committed
        self.dying = False

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Any]:
        async with self.store.transaction() as tx:
            yield _Tx(tx, self)
        if self.dying:
            raise Killed


class _Tx:
    def __init__(self, tx: MemoryTx, owner: KillingStore) -> None:
        self._tx, self._owner = tx, owner

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._tx, name)
        if name not in WRITES:
            return attr

        async def write(*args: Any, **kwargs: Any) -> Any:
            owner = self._owner
            owner.writes += 1
            if owner.writes == owner.at and not owner.committed:
                raise Killed
            owner.dying = owner.dying or owner.writes == owner.at
            return await attr(*args, **kwargs)

        return write


async def count_writes(world: World) -> int:
    counting = KillingStore(world.store, at=0)
    await plan_and_release(world, nodes_of(world, 1))
    await world.settle(world.executor(counting))
    return counting.writes


CLEAN_RUN_WRITES = 12
"""preflight, push announced, task recorded, staged, budget taken, drained, activation
announced, activation's task recorded, activated, BMC back, verified, given back."""


async def test_the_kill_points_cover_every_write_of_a_clean_run(world: World) -> None:
    assert await count_writes(world) == CLEAN_RUN_WRITES


@pytest.mark.parametrize("at", range(1, CLEAN_RUN_WRITES + 1))
async def test_killed_at_any_write_and_restarted_pushes_once(world: World, at: int) -> None:
    w = world
    (node,) = nodes_of(w, 1)
    await plan_and_release(w, (node,))
    dying = w.executor(KillingStore(w.store, at))
    with pytest.raises(Killed):
        await w.settle(dying)
    w.store.advance(FAST.lease_s + 1)  # the dead holder's lease lapses
    await w.settle(w.executor())  # the restarted updater
    item = w.store.item(node)
    assert item.state is NodeStep.DONE, item.reason
    assert len(w.pushes(node)) == 1
    assert w.gpu_versions(node) == {NEW_GPU_VERSION}
    assert w.rt.scheduler.node(node).drain is None
    owned = [e.action for e in w.rt.scheduler.ledger if e.node_id == node and e.by == OWNER]
    assert owned[-1] == "resume"


# Right after a commit announcing a send, before the send: the restarted updater never sends
# again. A push it cannot account for fails the node with that reason; an activation it asks
# the BMC about (issue 29 item 6): the image still staged, the old version running and no task
# say it never reached the BMC, so the node is given back cancelled, not quarantined.
UNSENT = {2: NodeStep.FAILED, 7: NodeStep.CANCELLED}  # push announced; activation announced


@pytest.mark.parametrize("at", range(1, CLEAN_RUN_WRITES + 1))
async def test_killed_after_any_commit_and_restarted_never_pushes_twice(
    world: World, at: int
) -> None:
    w = world
    (node,) = nodes_of(w, 1)
    await plan_and_release(w, (node,))
    dying = w.executor(KillingStore(w.store, at, committed=True))
    with pytest.raises(Killed):
        await w.settle(dying)
    w.store.advance(FAST.lease_s + 1)
    restarted = w.executor()
    # Its deadlines (the reset's reachable_s before an unsent activation is concluded) run on
    # the store's clock, which settle moves on: not on the wall clock, which a busy machine
    # moves at its own pace against settle's bounded rounds.
    restarted.clock = lambda: w.store.now
    await w.settle(restarted)
    item = w.store.item(node)
    assert item.state is UNSENT.get(at, NodeStep.DONE), item.reason
    assert len(w.pushes(node)) == (0 if at == 2 else 1)
    if item.state is NodeStep.DONE:
        assert w.gpu_versions(node) == {NEW_GPU_VERSION}
        assert w.rt.scheduler.node(node).drain is None
    else:
        assert "not sent again" in item.reason or "never reached the BMC" in item.reason
    if item.state is NodeStep.CANCELLED:
        assert w.gpu_versions(node) != {NEW_GPU_VERSION}  # nothing was activated
        assert w.rt.scheduler.node(node).drain is None  # given back
        assert w.actions(node, "UpdateService.Activate") == []
