"""The whole rollout on real NATS + PostgreSQL and the simulator (issue 13): attest, inventory,
planner, updater and healthgate started in-process together, over one simulated fleet whose
node agents publish health. A signed release kit moving the GPU VBIOS is attested; a routine
intent -> canary ``wave.planned`` -> pushes (one accepted per node in the BMC ledgers) ->
``gate.passed`` after the soak -> the next wave -> ``rollout.completed`` and ``pin.changed``; a
fresh sweep finds every node conforming. A bad image instead degrades the canary's health:
``gate.tripped`` -> ``rollout.halted``, and no node outside the canary was touched."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from lockstep_cli.polling import until
from lockstep_common.vocabulary import Component
from lockstep_inventory import queries
from lockstep_inventory.adapters import state
from lockstep_sim.faults import Fault, FaultPlan
from tests.integration.rollout_stack import NODES, Stack, running_stack
from tests.integration.sim.pldm_fixtures import NEW_GPU_VERSION

pytestmark = pytest.mark.integration


@pytest.fixture
async def stack(
    servers: Any, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Stack]:
    async with running_stack(servers, namespace, tmp_path, monkeypatch) as running:
        yield running


async def test_an_attested_bundle_rolls_out_over_the_fleet_wave_by_wave(stack: Stack) -> None:
    fleet = [n.id for n in stack.rt.fleet]
    old = {
        c.version
        for m, c in stack.rt.simulator.bmc(fleet[0]).node.components.items()
        if m.startswith("HGX_FW_GPU_")
    }
    assert NEW_GPU_VERSION not in old  # the bundle really moves the fleet
    await stack.start_rollout()

    (canary,) = await stack.wait("planner", "wave.planned.")
    assert canary["wave"] == 0 and canary["components"] == [str(Component.GPU_VBIOS)]
    assert len(canary["node_ids"]) == 5, json.dumps(canary["strata"], indent=1)
    (first_pass,) = await stack.wait("healthgate", "gate.passed.")
    assert first_pass["wave"] == 0
    for node in fleet:  # the canary alone was flashed before its gate passed
        assert len(stack.pushes(node)) == (1 if node in canary["node_ids"] else 0), node

    (done,) = await stack.wait("planner", "rollout.completed.")
    waves = await stack.emitted("planner", "wave.planned.")
    assert [w["wave"] for w in waves] == [0, 1]
    assert sorted(n for w in waves for n in w["node_ids"]) == sorted(fleet)
    passed = await stack.emitted("healthgate", "gate.passed.")
    assert [p["wave"] for p in passed] == [0, 1]
    assert done["nodes_updated"] == NODES and done["nodes_failed"] == 0
    for node in fleet:  # one accepted push per node, the new firmware running, drain released
        assert len(stack.pushes(node)) == 1, node
        comps = stack.rt.simulator.bmc(node).node.components
        assert {c.version for m, c in comps.items() if m.startswith("HGX_FW_GPU_")} == {
            NEW_GPU_VERSION
        }
        assert stack.rt.scheduler.node(node).drain is None

    (pin,) = await stack.wait("planner", "pin.changed.")
    assert pin["stack"] == {"gb200": {str(Component.GPU_VBIOS): NEW_GPU_VERSION}}

    async def pinned() -> bool:
        async with stack.apps["inventory"].require().pool.acquire() as conn:
            return any(p.stack_hash == pin["stack_hash"] for p in await state.pins(conn))

    await until(pinned, what="the inventory applied the rollout's pin")
    await stack.sweep()  # the inventory reads the fleet again, and judges it by the new pin
    async with stack.apps["inventory"].require().pool.acquire() as conn:
        status = await queries.fleet_status(conn)
        drift = await state.drift(conn, fleet)
    assert (status.total.nodes, status.total.conforming) == (NODES, NODES), status.as_json()
    for node in fleet:  # the pinned GPU VBIOS is what runs; nothing else is pinned, nor drifted
        assert {(str(i.component), str(i.kind)) for i in drift[node].items} == {
            (str(i.component), "unknown") for i in drift[node].items
        }
        assert all(i.component is not Component.GPU_VBIOS for i in drift[node].items), node


async def test_a_bad_image_trips_the_canary_gate_and_no_node_outside_the_canary_is_touched(
    stack: Stack,
) -> None:
    # The image degrades the GPUs of whichever node activates it: XID 48 and 79 in the node
    # agents' health reports, busbw under the 92% rule.
    stack.rt.simulator.set_faults(FaultPlan(faults=(Fault("degrade_health", components=("gpu",)),)))
    await stack.start_rollout()
    (canary,) = await stack.wait("planner", "wave.planned.")
    (tripped,) = await stack.wait("healthgate", "gate.tripped.")
    assert tripped["wave"] == 0 and tripped["offending_nodes"]
    assert set(tripped["offending_nodes"]) <= set(canary["node_ids"])
    (halted,) = await stack.wait("planner", "rollout.halted.")
    assert halted["wave"] == 0 and halted["halted_by"] == "gate", halted
    (done,) = await stack.wait("updater", "wave.completed.")  # in-flight steps end
    assert done["wave"] == 0
    assert await stack.emitted("planner", "rollout.completed.") == []
    assert [w["wave"] for w in await stack.emitted("planner", "wave.planned.")] == [0]
    for node in tripped["offending_nodes"]:  # the bad image did reach the canary
        assert len(stack.pushes(node)) == 1, node
    assert any(e.node_id in canary["node_ids"] for e in stack.rt.scheduler.ledger)
    outside = [n.id for n in stack.rt.fleet if n.id not in canary["node_ids"]]
    assert len(outside) == NODES - 5
    for node in outside:
        # Not one mutating call: the BMC saw only the sweeps' session logins and logouts, the
        # scheduler never cordoned or drained it.
        calls = {e["action"] for e in stack.rt.simulator.bmc(node).ledger}
        assert calls <= {"session_create", "session_delete"}, (node, calls)
        assert [e for e in stack.rt.scheduler.ledger if e.node_id == node] == [], node
