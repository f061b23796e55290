"""The stored plan a reviewed plan hash names (``rollout start --plan``), with one set of
assertions run on both planner stores: PostgreSQL and the in-memory one the unit tests use."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from lockstep_planner.domain.rollout import RolloutState, WaveState
from lockstep_planner.store import IntentRow, RolloutRow, WaveRow
from lockstep_planner.testing.kit import attested, intent
from tests.integration.test_planner_fabric_store_contract import Backend, backend

pytestmark = pytest.mark.integration
__all__ = ["backend"]  # both stores, as the fabric contract test builds them
T0 = datetime(2026, 3, 1, tzinfo=UTC)


def rollout(plan_hash: str, at: datetime, marker: str) -> tuple[IntentRow, RolloutRow]:
    data = intent(attested(), intent_id=uuid.uuid4(), dry_run=True)
    rollout_id = f"r-{data.intent_id.hex[:16]}"
    row = IntentRow(data.intent_id, uuid.uuid4(), rollout_id, data, at)
    return row, RolloutRow(
        rollout_id=rollout_id,
        intent_id=data.intent_id,
        stack_hash=data.stack_hash,
        change_class=str(data.change_class),
        scope={},
        dry_run=True,
        state=RolloutState.PLANNED,
        plan_hash=plan_hash,
        plan={"marker": marker, "waves": [{"number": 0, "nodes": ["n1"]}]},
        approvals_needed=0,
        created_at=at,
        updated_at=at,
    )


async def test_the_newest_plan_with_a_hash_is_found_and_an_unknown_hash_is_none(
    backend: Backend,
) -> None:
    reviewed, other = "a" * 64, "b" * 64
    async with backend.store.transaction() as tx:
        for plan_hash, at, marker in (
            (reviewed, T0, "older"),
            (reviewed, T0 + timedelta(minutes=5), "newer"),
            (other, T0 + timedelta(minutes=9), "other"),
        ):
            row, made = rollout(plan_hash, at, marker)
            assert await tx.add_intent(row)
            await tx.add_rollout(made, [])
    async with backend.store.transaction() as tx:
        found = await tx.plan_with_hash(reviewed)
        assert found == {"marker": "newer", "waves": [{"number": 0, "nodes": ["n1"]}]}
        assert await tx.plan_with_hash("c" * 64) is None


async def test_an_intent_recorded_held_is_planned_by_its_holder_not_claimed_by_the_worker(
    backend: Backend,
) -> None:
    """``rollout start`` records its intent held (``add_intent(held_s=...)``): the worker's claim
    passes it by while the hold lasts, and the holder's claim (token 1) is the one that holds."""
    held, _ = rollout("a" * 64, T0, "held")
    waiting, _ = rollout("b" * 64, T0 + timedelta(minutes=1), "waiting")
    async with backend.store.transaction() as tx:
        assert await tx.add_intent(held, held_s=600)
        assert not await tx.add_intent(held, held_s=600)  # once per intent id
        assert await tx.add_intent(waiting)
    async with backend.store.transaction() as tx:
        claimed = await tx.claim_intent(60, T0 + timedelta(minutes=2))
        assert claimed is not None and claimed.intent_id == waiting.intent_id
        assert await tx.claim_intent(60, T0 + timedelta(minutes=2)) is None
        holder = IntentRow(
            held.intent_id, held.event_id, held.rollout_id, held.intent, T0,
            state="planning", attempts=1, lease_token=1,
        )  # fmt: skip
        assert await tx.still_holds(holder)


async def test_the_next_soak_end_is_the_earliest_future_one_of_a_running_rollout(
    backend: Backend,
) -> None:
    def soaking(rollout_id: str, number: int, until: datetime) -> WaveRow:
        return WaveRow(
            rollout_id,
            number,
            WaveState.SOAKING,
            (f"n{number}",),
            ("gpu_vbios",),
            1,
            0,
            60,
            60,
            soak_until=until,
        )

    async with backend.store.transaction() as tx:
        assert await tx.next_soak_end(T0) is None
        for marker, state, ends in (
            ("running", RolloutState.RUNNING, (T0 + timedelta(minutes=9), T0 - timedelta(1))),
            ("paused", RolloutState.PAUSED, (T0 + timedelta(minutes=1),)),  # not passed now
            ("later", RolloutState.RUNNING, (T0 + timedelta(minutes=4),)),
        ):
            row, made = rollout("d" * 64, T0, marker)
            assert await tx.add_intent(row)
            waves = [soaking(made.rollout_id, i, end) for i, end in enumerate(ends)]
            await tx.add_rollout(dataclasses.replace(made, state=state, dry_run=False), waves)
            for wave in waves:  # as the planner records a wave's soak
                await tx.save_wave(wave)
    async with backend.store.transaction() as tx:
        assert await tx.next_soak_end(T0) == T0 + timedelta(minutes=4)
        assert await tx.next_soak_end(T0 + timedelta(minutes=4)) == T0 + timedelta(minutes=9)
        assert await tx.next_soak_end(T0 + timedelta(minutes=9)) is None
