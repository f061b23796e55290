"""A/B flip-back after a tripped gate, on the simulator: the canary node that activated the
image runs its previous bank again, read back and reported ``device.rolled_back``, drained and
given back by Lockstep; a node that activated nothing gets no call; a flip-back is sent once."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from lockstep_common.envelope import make_envelope, source_of
from lockstep_common.events.v1 import DeviceRolledBack, GateTripped, WaveCompleted
from lockstep_common.vocabulary import Component, GateVerdict
from lockstep_updater.domain.remedy import RemedyPolicy
from lockstep_updater.domain.steps import NodeStep
from lockstep_updater.handlers import Handlers
from lockstep_updater.ports import OWNER
from lockstep_updater.store import ROLLBACK
from tests.integration.sim.pldm_fixtures import NEW_GPU_VERSION
from tests.integration.updater.conftest import ROLLOUT, World
from tests.integration.updater.test_executor_sim import nodes_of, plan_and_release

HANDLERS = Handlers(RemedyPolicy.AUTOMATIC)
NOW = datetime(2026, 3, 2, 12, tzinfo=UTC)  # handlers are given the time

pytestmark = pytest.mark.integration
SWITCH = "LockstepSim.SwitchBank"  # the BMC ledger's action for the OEM bank switch


async def trip(w: World, *offending: str) -> None:
    tripped = GateTripped(
        rollout_id=ROLLOUT,
        wave=0,
        verdict=GateVerdict.TRIPPED,
        evidence=(),
        offending_nodes=offending,
    )
    async with w.store.transaction() as tx:
        await HANDLERS.gate_tripped(
            tx, make_envelope(tripped, source=source_of("healthgate")), now=NOW
        )


def switches(w: World, node: str) -> list[str]:
    return [
        e["targets"][0]
        for e in w.rt.simulator.bmc(node).ledger
        if e["action"] == SWITCH and e.get("status") == 202
    ]


async def test_a_tripped_gate_flips_the_activated_canary_back_and_leaves_the_rest(
    world: World,
) -> None:
    w = world
    flashed, skipped = nodes_of(w, 2)
    old = w.gpu_versions(flashed)
    w.rt.scheduler.drain(skipped, "hardware ticket 4711", "ops")  # its update ends untouched
    await plan_and_release(w, (flashed, skipped), max_unavailable=2)
    await w.settle()
    assert w.gpu_versions(flashed) == {NEW_GPU_VERSION}
    await trip(w, flashed)
    await w.settle()

    rollbacks = {i.node_id: i for i in w.store.items if i.kind == ROLLBACK}
    assert rollbacks[flashed].state is NodeStep.DONE
    assert w.gpu_versions(flashed) == old  # the previous bank runs again
    members = sorted(m for m in w.rt.simulator.bmc(flashed).node.components if "FW_GPU" in m)
    assert sorted(switches(w, flashed)) == members  # one switch per GPU, sent once
    assert [e.action for e in w.rt.scheduler.ledger if e.node_id == flashed and e.by == OWNER] == [
        "drain",
        "resume",
        "drain",
        "resume",
    ]
    (rolled,) = [e for e in w.store.events.events if isinstance(e, DeviceRolledBack)]
    assert (rolled.node_id, rolled.component) == (flashed, Component.GPU_VBIOS)
    assert (rolled.from_version, {rolled.to_version}) == (NEW_GPU_VERSION, old)

    # The node whose update activated nothing: its flip-back ends at once, no call sent.
    assert rollbacks[skipped].state is NodeStep.CANCELLED
    assert "nothing was activated" in rollbacks[skipped].reason
    assert switches(w, skipped) == []
    drain = w.rt.scheduler.node(skipped).drain
    assert drain is not None and drain.by == "ops"
    # The wave completed once, from its updates; flip-backs are not counted in it.
    assert len([e for e in w.store.events.events if isinstance(e, WaveCompleted)]) == 1

    await trip(w, flashed)  # the same verdict again: nothing more to do
    await w.settle()
    assert len([i for i in w.store.items if i.kind == ROLLBACK]) == 2
    assert sorted(switches(w, flashed)) == members


async def test_a_flip_back_waits_for_the_update_in_flight(world: World) -> None:
    w = world
    (node,) = nodes_of(w, 1)
    await plan_and_release(w, (node,))
    ex = w.executor(one_step_a_claim=True)
    while w.store.item(node).state is not NodeStep.AWAITING_BMC:  # activated, not verified
        assert await ex.step()
    await trip(w, node)
    await w.settle(ex)
    update = next(i for i in w.store.items if i.node_id == node and i.kind != ROLLBACK)
    assert update.state is NodeStep.DONE  # in-flight device steps finish
    assert w.store.item(node).state is NodeStep.DONE and w.gpu_versions(node) != {NEW_GPU_VERSION}
