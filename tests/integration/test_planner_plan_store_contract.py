"""The stored plan a reviewed plan hash names (``rollout start --plan``), with one set of
assertions run on both planner stores: PostgreSQL and the in-memory one the unit tests use."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from lockstep_planner.domain.rollout import RolloutState
from lockstep_planner.store import IntentRow, RolloutRow
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
