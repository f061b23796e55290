"""The sender's own fence (``steps.lease_fence``) beyond the BMC and the cordon: an in-band call
to the node agent and the reaper's give-back of a drain are not sent by a worker whose lease may
have lapsed (paused between its claim and the send), and are sent by one still within it."""

from __future__ import annotations

from typing import Any, cast

import pytest

from lockstep_common.clock import ManualClock
from lockstep_common.events.v1 import FleetNode
from lockstep_updater.domain.inband import Call
from lockstep_updater.domain.steps import NodeStep
from lockstep_updater.executor import Executor
from lockstep_updater.ports import AgentOrder
from lockstep_updater.steps import in_band
from lockstep_updater.steps.ends import LostClaim
from lockstep_updater.steps.lease_fence import holding
from lockstep_updater.steps.policy import ExecutorPolicy
from lockstep_updater.testing.memory_store import MemoryStore
from tests.unit.updater.test_handlers import deliver, plan, wave

pytestmark = pytest.mark.unit
S = NodeStep
ORDER = AgentOrder("s1", "n1", "42", 7, "target", "a" * 64)
LEASE_S = 60.0


class Agent:
    def __init__(self) -> None:
        self.calls: list[str] = []

    async def install_driver(self, order: AgentOrder, version: str) -> None:
        self.calls.append(f"install {version}")

    async def reboot(self, order: AgentOrder) -> None:
        self.calls.append("reboot")


@pytest.mark.parametrize(("paused_s", "sent"), [(LEASE_S, []), (LEASE_S - 1, ["reboot"])])
async def test_an_agent_call_is_not_sent_once_the_lease_may_have_lapsed(
    paused_s: float, sent: list[str]
) -> None:
    clock, agent = ManualClock(), Agent()
    with holding(clock, LEASE_S):
        clock.advance(paused_s)  # the worker stalled after recording the call as sent
        if sent:
            await in_band._send(cast(Any, agent), ORDER, Call.REBOOT, "580.95.05")
        else:
            with pytest.raises(LostClaim):
                await in_band._send(cast(Any, agent), ORDER, Call.INSTALL, "580.95.05")
    assert agent.calls == sent


class OneNode:
    async def node(self, node_id: str) -> FleetNode:
        return FleetNode(
            node_id=node_id,
            site="s",
            profile="gb200",
            bmc_url="https://bmc.example",
            credentials="env:BMC",
        )


class Resumes:
    def __init__(self) -> None:
        self.resumed: list[str] = []

    async def resume(self, node_id: str) -> bool:
        self.resumed.append(node_id)
        return True


@pytest.mark.parametrize(("stall_s", "resumed"), [(LEASE_S, []), (0.0, ["n1"])])
async def test_the_reapers_give_back_is_fenced_by_its_own_lease(
    monkeypatch: pytest.MonkeyPatch, stall_s: float, resumed: list[str]
) -> None:
    store = MemoryStore()
    await deliver(store, plan(("n1",)))
    await deliver(store, wave(0, "n1"))
    item = store.item("n1")
    item.state, item.claimed_at = S.UNCORDONING, store.now  # its worker gone
    clock = ManualClock()
    scheduler = Resumes()
    policy = ExecutorPolicy(lease_s=LEASE_S)
    ex = Executor(store, OneNode(), cast(Any, scheduler), cast(Any, None), policy)
    ex.clock = clock
    original = ex.store.transaction

    def stalled_after_claim() -> Any:
        # The reaper's claim commits, then the worker stalls before the give-back leaves.
        context = original()

        class Stall:
            async def __aenter__(self) -> Any:
                return await context.__aenter__()

            async def __aexit__(self, *exc: Any) -> Any:
                result = await context.__aexit__(*exc)
                clock.advance(stall_s)
                return result

        return Stall()

    monkeypatch.setattr(ex.store, "transaction", stalled_after_claim)
    await ex.reap(LEASE_S)
    assert scheduler.resumed == resumed
