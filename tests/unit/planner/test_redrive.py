"""The planner re-drives a released wave that shows no progress (reliability.md 7, A4: a
``wave.planned`` the broker acknowledged and then lost never reaches the updater): the same
event, under its own id, published again once per re-drive interval, never for a wave that
moves, soaks or belongs to a paused rollout."""

from __future__ import annotations

import dataclasses

import pytest

from lockstep_common.events.v1 import WavePlanned
from lockstep_planner.domain.rollout import RolloutState, WaveState
from tests.unit.planner.test_service import TIMING, Rig, emitted

pytestmark = pytest.mark.unit


def audit(rig: Rig, action: str) -> list[str]:
    return [e.detail for e in rig.store.tables.audit if e.action == action]


async def released() -> tuple[Rig, str]:
    rig = Rig()
    await rig.attest()
    rollout_id = await rig.submit()
    assert rig.wave(rollout_id, 0).state is WaveState.RELEASED
    return rig, rollout_id


async def test_a_wave_nobody_moved_is_released_again_under_its_event_id_once_per_interval() -> None:
    rig, rollout_id = await released()
    [(_, first)] = [(s, e) for s, e in rig.store.events.emitted if isinstance(e.data, WavePlanned)]
    assert rig.wave(rollout_id, 0).release_event == first.event_id

    rig.later(TIMING.redrive_s - 1)
    await rig.worker.timers(rig.store)
    assert rig.store.tables.republished == []

    rig.later(1)
    assert await rig.worker.timers(rig.store)
    assert rig.store.tables.republished == [(first.event_id, "redrive-1")]
    assert rig.wave(rollout_id, 0).redrives == 1
    [detail] = audit(rig, "wave re-driven")
    assert f"event {first.event_id}" in detail and "redrive-1" in detail

    # Not at every poll: the re-drive restarts the interval.
    rig.later(TIMING.redrive_s - 1)
    await rig.worker.timers(rig.store)
    assert len(rig.store.tables.republished) == 1
    rig.later(1)
    await rig.worker.timers(rig.store)
    assert rig.store.tables.republished[-1] == (first.event_id, "redrive-2")
    # Nothing new was emitted: the copy is the committed event itself.
    assert len(emitted(rig.store, WavePlanned)) == 1
    assert rig.state(rollout_id) is RolloutState.RUNNING


async def test_a_node_step_of_the_wave_is_progress_and_defers_the_redrive() -> None:
    rig, rollout_id = await released()
    node = rig.wave(rollout_id, 0).node_ids[0]
    rig.later(TIMING.redrive_s - 10)
    async with rig.store.transaction() as tx:
        await tx.record_step(rollout_id, node, "staged", rig.store.now)
    rig.later(20)
    await rig.worker.timers(rig.store)
    assert rig.store.tables.republished == []
    rig.later(TIMING.redrive_s)
    await rig.worker.timers(rig.store)
    assert len(rig.store.tables.republished) == 1


async def test_a_release_past_the_outbox_retention_is_emitted_again_with_the_same_id() -> None:
    rig, rollout_id = await released()
    first = rig.wave(rollout_id, 0).release_event
    rig.store.tables.published.clear()  # the outbox row was purged
    rig.later(TIMING.redrive_s)
    await rig.worker.timers(rig.store)
    releases = [e for _, e in rig.store.events.emitted if isinstance(e.data, WavePlanned)]
    assert [e.event_id for e in releases] == [first, first]
    assert releases[0].data == releases[1].data


async def test_a_soaking_wave_and_a_paused_rollout_are_not_redriven() -> None:
    rig, rollout_id = await released()
    await rig.complete_wave(rollout_id, 0)
    rig.later(TIMING.redrive_s * 3)
    await rig.worker.timers(rig.store)
    assert rig.wave(rollout_id, 0).state is WaveState.SOAKING
    assert rig.store.tables.republished == []

    rig2, paused = await released()
    rows = rig2.store.tables.rollouts
    rows[paused] = dataclasses.replace(rows[paused], state=RolloutState.PAUSED)
    rig2.later(TIMING.redrive_s * 3)
    await rig2.worker.timers(rig2.store)
    assert rig2.store.tables.republished == []
