"""The planner's promises through its service path (intent in, rollout or refusal out, on the
in-memory store): what the pure core promises must also hold for what the worker gives it."""

from __future__ import annotations

from typing import Any

import pytest

from lockstep_common.events.v1 import RolloutHalted, Strategy
from lockstep_common.vocabulary import ChangeClass, Component
from lockstep_planner.testing.kit import attested, fleet_node, image

from .test_service import Rig, emitted

pytestmark = pytest.mark.unit


async def planned_rig(**kwargs: Any) -> tuple[Rig, str]:
    rig = Rig()
    await rig.attest()
    return rig, await rig.submit(**kwargs)


async def test_a_strategy_cannot_raise_the_operators_budget() -> None:
    # The worker's operator budget is 4 per pool; asking for 60 is refused, not granted.
    rig, rollout_id = await planned_rig(strategy=Strategy(max_unavailable=60))
    [halted] = emitted(rig.store, RolloutHalted)
    assert halted.rollout_id == rollout_id
    assert "max_unavailable 60 is above the operator's budget of pool(s) p0 4" in halted.reason
    assert "may only lower it" in halted.reason
    assert not rig.store.tables.rollouts


async def test_a_strategy_may_lower_the_budget_and_every_wave_keeps_to_it() -> None:
    rig, rollout_id = await planned_rig(strategy=Strategy(max_unavailable=2))
    waves = [w for (r, _), w in rig.store.tables.waves.items() if r == rollout_id]
    assert waves and {w.max_unavailable for w in waves} == {2}
    assert rig.store.tables.rollouts[rollout_id].plan["max_unavailable"] == {"p0": 2}


async def test_a_strategy_cannot_shorten_the_class_soak() -> None:
    rig, _ = await planned_rig(change_class=ChangeClass.ROUTINE, strategy=Strategy(soak_seconds=60))
    [halted] = emitted(rig.store, RolloutHalted)
    assert "soak_seconds 60 is shorter than the change class's wave soak of 3600 s" in (
        halted.reason
    )


async def test_hgx_nvswitch_firmware_is_planned_for_every_hgx_node() -> None:
    # HGX nodes in racks of 4 with no shared NVLink domain: their baseboards' switches move.
    nodes = [
        fleet_node(i, profile="hgx-h100", rack=f"r{i // 4}", observed={Component.NVSWITCH: "1.0"})
        for i in range(8)
    ]
    rig = Rig(nodes)
    rig.bundle = attested(image(Component.NVSWITCH, "2.0", profile="hgx-h100", activation="reset"))
    await rig.attest()
    rollout_id = await rig.submit(change_class=ChangeClass.POWER_FABRIC, dry_run=True)
    plan = rig.store.tables.rollouts[rollout_id].plan
    switched = [
        n
        for w in plan["waves"]
        for s in w["stages"]
        if s["kind"] == "fabric_switch"
        for n in w["nodes"]
    ]
    assert sorted(switched) == sorted(n.node_id for n in nodes)
    assert all(c == ["nvswitch"] for c in plan["components"].values())
