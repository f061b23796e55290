"""The sender's own fence (reliability.md B3, issue 29): a worker paused between committing
"being sent" and sending it (GC, SIGSTOP, a VM stall) past its lease sends nothing, by its own
monotonic clock, to the BMC or the scheduler; a worker that was not paused sends as before."""

from __future__ import annotations

from typing import Any

import pytest

from lockstep_common.clock import ManualClock
from lockstep_updater.domain.guard import Decision
from lockstep_updater.domain.steps import NodeStep
from lockstep_updater.executor import Executor
from lockstep_updater.steps.context import StepContext
from tests.integration.updater.conftest import FAST, World
from tests.integration.updater.test_executor_sim import nodes_of, plan_and_release

pytestmark = pytest.mark.integration


def pause_after_check(
    monkeypatch: pytest.MonkeyPatch, clock: ManualClock, state: NodeStep, pause_s: float
) -> None:
    """The worker stalls for ``pause_s`` right after the fence-and-record transaction of a
    step in ``state`` committed, before it sends what it recorded."""
    checked = StepContext.check

    async def check_then_stall(self: StepContext, claim: Any, *args: Any, **kw: Any) -> Decision:
        decision = await checked(self, claim, *args, **kw)
        if claim.state is state:
            clock.advance(pause_s)
        return decision

    monkeypatch.setattr(StepContext, "check", check_then_stall)


async def stalling(
    w: World, monkeypatch: pytest.MonkeyPatch, state: NodeStep, pause_s: float
) -> tuple[str, Executor]:
    """A released node and an executor whose worker stalls ``pause_s`` after the check of a
    step in ``state`` (``pause_after_check``)."""
    (node,) = nodes_of(w, 1)
    await plan_and_release(w, (node,))
    ex = w.executor()
    clock = ManualClock()
    ex.clock = clock
    pause_after_check(monkeypatch, clock, state, pause_s)
    return node, ex


@pytest.mark.parametrize(
    ("pause_s", "pushed"),
    [(FAST.lease_s, 0), (FAST.lease_s - 1, 1)],
    ids=["paused past its lease: nothing sent", "paused within its lease: pushed"],
)
async def test_a_push_is_not_sent_once_the_senders_lease_may_have_lapsed(
    world: World, monkeypatch: pytest.MonkeyPatch, pause_s: float, pushed: int
) -> None:
    w = world
    node, ex = await stalling(w, monkeypatch, NodeStep.STAGING, pause_s)
    assert await ex.step()  # preflight, then staging in the same claim: recorded, then stalled
    assert len(w.pushes(node)) == pushed
    if not pushed:  # the item is left as recorded, to the next claim (it does not resend)
        item = w.store.item(node)
        assert item.state is NodeStep.STAGING
        assert item.progress["components"]["gpu_vbios"]["sent"] is True


class Cordons:
    """The scheduler, its cordons counted."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.sent: list[str] = []

    async def cordon(self, node_id: str, reason: str) -> None:
        self.sent.append(node_id)
        await self.inner.cordon(node_id, reason)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_a_cordon_is_not_sent_once_the_senders_lease_may_have_lapsed(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    w = world
    node, ex = await stalling(w, monkeypatch, NodeStep.DRAINING, FAST.lease_s)
    cordons = Cordons(ex.scheduler)
    ex.scheduler = cordons
    for _ in range(50):
        if w.store.item(node).state is NodeStep.DRAINING:
            break
        if not await ex.step():  # waiting (a budget, a retry): the store's clock moves on
            w.store.advance(FAST.retry_s)
    assert w.store.item(node).state is NodeStep.DRAINING
    w.store.advance(FAST.lease_s + 1)
    assert await ex.step()  # draining: checked, stalled past its lease, not sent
    assert cordons.sent == []
    monkeypatch.undo()
    w.store.advance(FAST.lease_s + 1)
    assert await ex.step()  # the next claim, not stalled, cordons
    assert cordons.sent == [node]
