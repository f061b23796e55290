"""The packaged routine change class and the packaged gate policy, together, on a healthy
simulated fleet and with a bad image (issue 31, item 2): the class picks a canary and controls
the gate can judge, so every gate passes and the rollout completes, or the bad image trips the
canary's gate. Only the soaks (hours) are made seconds, and the approval waived."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from lockstep_sim.faults import Fault, FaultPlan
from tests.integration.rollout_stack import NODES, Stack, running_stack

pytestmark = pytest.mark.integration


@pytest.fixture
async def stack(
    servers: Any, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Stack]:
    async with running_stack(servers, namespace, tmp_path, monkeypatch, packaged=True) as running:
        yield running


async def test_a_healthy_fleet_completes_with_every_gate_passed(stack: Stack) -> None:
    await stack.start_rollout()
    (done,) = await stack.wait("planner", "rollout.completed.")
    waves = await stack.emitted("planner", "wave.planned.")
    gates = await stack.emitted("healthgate", "gate.")
    assert len(waves) >= 2, waves  # a canary, then the rest
    assert [(g["wave"], g["verdict"]) for g in gates] == [(w["wave"], "passed") for w in waves]
    assert done["nodes_updated"] == NODES and done["nodes_failed"] == 0
    for gate in gates:  # judged on data, canary against control: not waved through
        busbw = [e for e in gate["evidence"] if e["metric"].startswith("nccl_busbw_gbps[")]
        assert busbw and all(e["passed"] and e["control"] is not None for e in busbw), gate


async def test_a_bad_image_trips_the_canary_gate(stack: Stack) -> None:
    stack.rt.simulator.set_faults(FaultPlan(faults=(Fault("degrade_health", components=("gpu",)),)))
    await stack.start_rollout()
    (canary,) = await stack.wait("planner", "wave.planned.")
    (tripped,) = await stack.wait("healthgate", "gate.tripped.")
    assert tripped["wave"] == 0 and set(tripped["offending_nodes"]) <= set(canary["node_ids"])
    (halted,) = await stack.wait("planner", "rollout.halted.")
    assert halted["wave"] == 0 and halted["halted_by"] == "gate", halted
    assert [w["wave"] for w in await stack.emitted("planner", "wave.planned.")] == [0]
