"""The planner's promises through its service path (intent in, rollout or refusal out, on the
in-memory store): what the pure core promises must also hold for what the worker gives it."""

from __future__ import annotations

from typing import Any

import pytest

from lockstep_common.events.v1 import RolloutHalted, Strategy
from lockstep_common.vocabulary import ChangeClass, Component
from lockstep_planner.domain.rollout import RolloutState
from lockstep_planner.testing.kit import attested, drifted, fleet_node, image
from lockstep_planner.testing.memory_store import MemoryFleet

from .test_service import Rig, emitted

pytestmark = pytest.mark.unit


async def planned_rig(**kwargs: Any) -> tuple[Rig, str]:
    rig = Rig()
    await rig.attest()
    return rig, await rig.submit(**kwargs)


async def test_a_strategy_cannot_raise_the_operators_budget_only_lower_it() -> None:
    # The worker's operator budget is 4 per pool; asking for 60 is refused, not granted.
    rig, rollout_id = await planned_rig(strategy=Strategy(max_unavailable=60))
    [halted] = emitted(rig.store, RolloutHalted)
    assert halted.rollout_id == rollout_id
    assert "max_unavailable 60 is above the operator's budget of pool(s) p0 4" in halted.reason
    assert "may only lower it" in halted.reason
    assert not rig.store.tables.rollouts
    lowered = await rig.submit(strategy=Strategy(max_unavailable=2))
    waves = [w for (r, _), w in rig.store.tables.waves.items() if r == lowered]
    assert waves and {w.max_unavailable for w in waves} == {2}
    assert rig.store.tables.rollouts[lowered].plan["max_unavailable"] == {"p0": 2}


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


async def test_the_same_request_over_the_same_fleet_is_the_same_plan() -> None:
    rig = Rig()
    await rig.attest()
    first = await rig.submit(change_class=ChangeClass.ROUTINE, dry_run=True)
    second = await rig.submit(change_class=ChangeClass.ROUTINE, dry_run=True)
    a, b = rig.store.tables.rollouts[first], rig.store.tables.rollouts[second]
    assert first != second
    assert a.plan_hash == b.plan_hash
    assert a.plan["waves"][0] == b.plan["waves"][0] and a.plan["strata"] == b.plan["strata"]
    # Asking anything else (here a wider canary) is another plan.
    third = await rig.submit(
        change_class=ChangeClass.ROUTINE, dry_run=True, strategy=Strategy(canary_nodes=5)
    )
    assert rig.store.tables.rollouts[third].plan_hash != a.plan_hash
    # A strategy with wave fractions (floats) is hashed into the seed too.
    slower = Strategy(wave_fractions=(0.05, 0.1, 0.25, 1.0))
    fourth = await rig.submit(change_class=ChangeClass.ROUTINE, dry_run=True, strategy=slower)
    fifth = await rig.submit(change_class=ChangeClass.ROUTINE, dry_run=True, strategy=slower)
    hashes = {rig.store.tables.rollouts[r].plan_hash for r in (fourth, fifth)}
    assert len(hashes) == 1 and a.plan_hash not in hashes


async def test_start_with_the_reviewed_plan_hash_starts_exactly_that_plan() -> None:
    rig = Rig()
    await rig.attest()
    dry_run = await rig.submit(dry_run=True)
    reviewed = rig.store.tables.rollouts[dry_run]
    started = await rig.submit(plan_hash=reviewed.plan_hash)
    row = rig.store.tables.rollouts[started]
    assert row.plan_hash == reviewed.plan_hash and not row.dry_run
    assert rig.state(started) is RolloutState.RUNNING
    assert rig.wave(started, 0).node_ids == tuple(reviewed.plan["waves"][0]["nodes"])


async def test_start_of_a_reviewed_plan_is_refused_with_the_difference_once_the_fleet_changed() -> (
    None
):
    rig = Rig()
    await rig.attest()
    dry_run = await rig.submit(dry_run=True)
    reviewed = rig.store.tables.rollouts[dry_run]
    rig.fleet = MemoryFleet([*rig.fleet.fleet[:-1], drifted(19), fleet_node(20)])
    started = await rig.submit(plan_hash=reviewed.plan_hash)
    [halted] = emitted(rig.store, RolloutHalted)
    assert halted.rollout_id == started
    assert f"the plan changed since it was reviewed (plan {reviewed.plan_hash[:12]}" in (
        halted.reason
    )
    assert "1 node(s) new to it: n020" in halted.reason
    assert "n019: wave" in halted.reason and "unexplained drift" in halted.reason
    assert started not in rig.store.tables.rollouts


async def test_start_with_a_plan_hash_no_plan_had_is_refused() -> None:
    rig = Rig()
    await rig.attest()
    await rig.submit(plan_hash="0" * 64)
    [halted] = emitted(rig.store, RolloutHalted)
    assert f"plan {'0' * 64} was never made by this planner" in halted.reason
    assert not rig.store.tables.rollouts


async def test_a_domain_over_the_default_budget_is_refused_naming_the_setting() -> None:
    # An NVL72 domain is 18 trays; the operator's budget here is 4.
    nodes = [
        fleet_node(i, fabric_domain="nvl-0", rack=f"r{i // 18}", observed={Component.NVSWITCH: "1"})
        for i in range(18)
    ]
    rig = Rig(nodes)
    rig.bundle = attested(image(Component.NVSWITCH, "2.0", activation="reset"))
    await rig.attest()
    rollout_id = await rig.submit(change_class=ChangeClass.POWER_FABRIC, dry_run=True)
    [refused] = [a for a in rig.store.audit_of(rollout_id) if a.action == "refused"]
    assert (
        "fabric domain nvl-0 takes 18 nodes of pool p0 out at once, over its max_unavailable of "
        "4 (set LOCKSTEP_PLANNER_DEFAULT_MAX_UNAVAILABLE to at least 18 to move it)"
    ) in refused.detail
