"""A work item whose progress this updater cannot read (a later release's schema after an upgrade
was rolled back mid-rollout, or a shape no release writes) is left as stored: no scheduler or BMC
call, the document untouched, the item kept in its step with the reason and claimed again only a
lease later. Before, the claim raised, lapsed, and was taken again at once, for ever."""

from __future__ import annotations

from typing import Any, cast

import pytest

from lockstep_updater.domain.steps import NodeStep
from lockstep_updater.executor import Executor
from lockstep_updater.testing.memory_store import MemoryStore
from tests.unit.updater.test_handlers import deliver, plan, wave

pytestmark = pytest.mark.unit
S = NodeStep
LATER = {"schema_version": 99, "components": {}, "a_later_key": {"kept": True}}


class NoScheduler:
    """Any call fails the test: an unreadable item must not touch the node."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the scheduler was called ({name})")


async def _stored(state: NodeStep, progress: dict[str, Any]) -> MemoryStore:
    store = MemoryStore()
    await deliver(store, plan(("n1",)))
    await deliver(store, wave(0, "n1"))
    item = store.item("n1")
    item.state, item.progress = state, dict(progress)
    return store


def _executor(store: MemoryStore) -> Executor:
    # Neither the fleet nor the images may be reached: the step never runs.
    return Executor(store, cast(Any, None), cast(Any, NoScheduler()), cast(Any, None))


@pytest.mark.parametrize("state", [S.PREFLIGHT, S.DRAINING, S.ACTIVATING])
async def test_an_unreadable_item_is_left_as_stored_and_not_claimed_again_at_once(
    state: NodeStep,
) -> None:
    store = await _stored(state, LATER)
    executor = _executor(store)
    assert await executor.step()  # claimed, and kept in its step
    item = store.item("n1")
    assert item.state is state and item.progress == LATER
    assert "progress unreadable" in item.reason and "schema_version 99" in item.reason
    assert not store.events.emitted  # no device.* event, no wave completion
    assert not await executor.step()  # not taken again before a lease has gone by
    store.advance(executor.policy.lease_s + 1)
    assert await executor.step()  # then tried again (a later updater may be back by then)
    assert store.item("n1").progress == LATER


async def test_the_reaper_leaves_an_unreadable_orphan_as_stored() -> None:
    store = await _stored(S.DRAINING, LATER)
    executor = _executor(store)
    assert await executor.step()
    store.advance(executor.policy.lease_s * 3)
    assert await executor.reap(executor.policy.lease_s) == 1
    item = store.item("n1")
    assert item.state is S.DRAINING and item.progress == LATER  # not given back, not rewritten
