"""The planner against real NATS and PostgreSQL: intents become rollouts once, gates release
and halt waves, and a restart mid-rollout loses nothing."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from lockstep_cli.polling import until
from lockstep_common import subjects
from lockstep_common.events.v1 import BundleAttested, GatePassed, GateTripped, WaveCompleted
from lockstep_common.vocabulary import GateVerdict
from lockstep_planner.handlers import rollout_id_of
from lockstep_planner.testing.kit import attested, evidence, intent
from tests.integration.planner_service.conftest import Planner, ids

pytestmark = pytest.mark.integration


async def attest(planner: Planner) -> BundleAttested:
    bundle = attested()
    await planner.publish(subjects.bundle_attested(), bundle)

    async def known() -> bool:
        n = await planner.app.require().pool.fetchval("SELECT count(*) FROM bundles")
        return bool(n)

    await until(known, what="bundle recorded")
    return bundle


async def start_rollout(planner: Planner) -> str:
    data = intent(await attest(planner))
    await planner.publish(subjects.intent_submitted(), data)
    await planner.wait_for("wave.planned.")
    return rollout_id_of(data.intent_id)


async def finish_wave(planner: Planner, rollout_id: str, wave: dict[str, Any]) -> None:
    nodes: tuple[str, ...] = tuple(wave["node_ids"])
    number: int = wave["wave"]
    await planner.publish(
        subjects.wave_completed(rollout_id),
        WaveCompleted(rollout_id=rollout_id, wave=number, succeeded=nodes, failed=()),
    )
    await planner.publish(
        subjects.gate(GateVerdict.PASSED, rollout_id),
        GatePassed(
            rollout_id=rollout_id, wave=number, verdict=GateVerdict.PASSED, evidence=(evidence(),)
        ),
    )


async def test_an_intent_is_planned_and_its_canary_released_with_controls(
    planner: Planner,
) -> None:
    rollout_id = await start_rollout(planner)
    [planned] = await planner.wait_for("rollout.planned.")
    assert planned["rollout_id"] == rollout_id
    assert sorted(n for w in planned["waves"] for n in w["node_ids"]) == [
        f"n{i:03d}" for i in range(20)
    ]
    [wave0] = await planner.emitted("wave.planned.")
    assert wave0["wave"] == 0 and wave0["strata"][0]["control_ids"]
    assert planner.inventory.pages == [7, 7, 6], "the fleet was read a page at a time"
    assert await planner.state(rollout_id) == "running"


async def test_gates_release_each_wave_until_completion_moves_the_pin(planner: Planner) -> None:
    rollout_id = await start_rollout(planner)
    [planned] = await planner.wait_for("rollout.planned.")
    total = len(planned["waves"])
    for number in range(total):
        waves = await planner.wait_for("wave.planned.", number + 1)
        assert ids(waves) == list(range(number + 1))
        await finish_wave(planner, rollout_id, waves[-1])
    [done] = await planner.wait_for("rollout.completed.")
    assert done["nodes_updated"] == 20
    [pin] = await planner.wait_for("pin.changed.")
    assert pin["rollout_id"] == rollout_id and pin["stack_hash"] == attested().stack_hash
    assert await planner.state(rollout_id) == "completed"


async def test_a_tripped_gate_halts_the_rollout_with_the_evidence(planner: Planner) -> None:
    rollout_id = await start_rollout(planner)
    await planner.publish(
        subjects.gate(GateVerdict.TRIPPED, rollout_id),
        GateTripped(
            rollout_id=rollout_id,
            wave=0,
            verdict=GateVerdict.TRIPPED,
            evidence=(evidence(passed=False),),
            offending_nodes=("n003",),
        ),
    )
    [halted] = await planner.wait_for("rollout.halted.")
    assert halted["halted_by"] == "gate" and "nccl_busbw_ratio" in halted["reason"]
    assert await planner.state(rollout_id) == "halted"
    assert ids(await planner.emitted("wave.planned.")) == [0]


async def test_a_duplicate_intent_yields_one_rollout(planner: Planner) -> None:
    data = intent(await attest(planner))
    # The same intent as five distinct messages, at once (a CLI retrying, two operators).
    await asyncio.gather(*(planner.publish(subjects.intent_submitted(), data) for _ in range(5)))
    await planner.wait_for("rollout.planned.")
    await planner.wait_for("wave.planned.")
    pool = planner.app.require().pool

    async def settled() -> bool:
        n = await pool.fetchval("SELECT count(*) FROM inbox WHERE consumer LIKE '%planner-intents'")
        return int(n) >= 5

    await until(settled, what="all five deliveries handled")
    assert await pool.fetchval("SELECT count(*) FROM rollouts") == 1
    assert len(await planner.emitted("rollout.planned.")) == 1


async def test_a_restart_mid_rollout_carries_on_where_it_was(planner: Planner) -> None:
    rollout_id = await start_rollout(planner)
    [wave0] = await planner.emitted("wave.planned.")
    await planner.restart()
    await finish_wave(planner, rollout_id, wave0)
    waves = await planner.wait_for("wave.planned.", 2)
    assert ids(waves) == [0, 1]
    assert await planner.state(rollout_id) == "running"
