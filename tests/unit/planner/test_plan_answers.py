"""A 12,500-node plan answered over the bus within NATS's 1 MiB max payload (issue 26, item 3):
its summary and pages of node places, each under the limit, that put every node back where the
plan has it."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import pytest

from lockstep_common.compatibility.files import packaged_rules
from lockstep_common.envelope import make_envelope
from lockstep_common.events.v1 import (
    MAX_ITEMS,
    MAX_SHOWN,
    PLAN_PAGE_BYTES,
    PlanStratum,
    RolloutPlanAnswered,
    RolloutState,
    RolloutStatusAnswered,
)
from lockstep_common.vocabulary import ChangeClass
from lockstep_planner.adapters.policy_file import packaged_policy
from lockstep_planner.handlers import on_bundle_attested, rollout_id_of
from lockstep_planner.lifecycle import Timing
from lockstep_planner.plan_views import page_of, status_strata_of, summary_of
from lockstep_planner.planning import Planning, decide
from lockstep_planner.store import IntentRow
from lockstep_planner.testing.kit import attested, drifted, fleet_node, intent
from lockstep_planner.testing.memory_store import MemoryStore

pytestmark = pytest.mark.unit
NATS_MAX_PAYLOAD = 1 << 20


async def test_a_12500_node_plan_is_answered_in_pages_under_the_max_payload() -> None:
    store = MemoryStore()
    bundle = attested()
    async with store.transaction() as tx:
        await on_bundle_attested(tx, make_envelope(bundle, source="/t"), now=store.now)

    def name(i: int) -> str:  # node ids as long as a subject token may be (64)
        return f"gb200-nvl72-site{i % 3}-hall{i // 2000:02d}-rack{i // 18:04d}-tray{i:05d}-x".ljust(
            64, "x"
        )

    fleet = [
        drifted(i).model_copy(update={"node_id": name(i)})
        if i % 97 == 0
        else fleet_node(
            i,
            node_id=name(i),
            rack=f"rack{i // 18:04d}",
            pool=f"p{i % 8}",
            supplier=("acme", "globex")[i % 2],
        )
        for i in range(12_500)
    ]
    asked = intent(bundle, change_class=ChangeClass.STANDARD, dry_run=True)
    row = IntentRow(asked.intent_id, uuid.uuid4(), rollout_id_of(asked.intent_id), asked, store.now)
    planning = Planning(packaged_policy(), 64, Timing(), {}, rules=packaged_rules())
    async with store.transaction() as tx:
        decision = await decide(tx, row, fleet, planning, store.now)
    assert decision.rollout is not None, decision.reasons
    plan = decision.rollout.plan
    # 860 kB of JSON here: node lists grow with the fleet and its ids, so they come in pages.
    assert len(json.dumps(plan)) > PLAN_PAGE_BYTES

    summary = summary_of(plan, decision.rollout.plan_hash, "gb200-driver@2026.03")
    where: dict[str, int] = {}
    offset: int | None = 0
    pages = 0
    while offset is not None:
        nodes, places, after = page_of(plan, offset)
        answer = RolloutPlanAnswered(plan=summary, nodes=nodes, places=places, next_offset=after)
        assert len(make_envelope(answer, source="/t").to_json()) < NATS_MAX_PAYLOAD
        where.update(zip(nodes, places, strict=True))
        offset, pages = after, pages + 1
    assert pages > 1 and len(where) == summary.nodes == 12_500
    for wave in plan["waves"]:
        assert {n for n, p in where.items() if p == wave["number"]} == set(wave["nodes"])
    excluded = {n for n, p in where.items() if p < 0}
    assert excluded == {e["node"] for e in plan["excluded"]} and len(excluded) == 129
    assert [e.reason for e in summary.excluded] == [
        summary.excluded[-1 - where[e["node"]]].reason for e in plan["excluded"][:1]
    ]
    assert sum(w.nodes for w in summary.waves) + len(excluded) == 12_500


async def test_rollout_status_names_each_stratum_as_planned_with_its_size() -> None:
    """The console's rollout page and ``rollout status --json`` show the plan's strata as the
    planner chose them (issue 32): read from the stored plan, never chosen again."""
    store = MemoryStore()
    bundle = attested()
    async with store.transaction() as tx:
        await on_bundle_attested(tx, make_envelope(bundle, source="/t"), now=store.now)
    fleet = [fleet_node(i, supplier=("acme", "globex")[i % 2]) for i in range(120)]
    asked = intent(bundle, change_class=ChangeClass.STANDARD)
    row = IntentRow(asked.intent_id, uuid.uuid4(), rollout_id_of(asked.intent_id), asked, store.now)
    planning = Planning(packaged_policy(), 64, Timing(), {}, rules=packaged_rules())
    async with store.transaction() as tx:
        decision = await decide(tx, row, fleet, planning, store.now)
    assert decision.rollout is not None, decision.reasons
    plan = decision.rollout.plan

    strata = status_strata_of(plan)
    assert [(s.profile, s.supplier, s.size) for s in strata] == [
        ("gb200", "acme", 60),
        ("gb200", "globex", 60),
    ]
    for shown, stored in zip(strata, plan["strata"], strict=True):
        assert shown.canary == tuple(stored["canary"]) and shown.canary_count >= 1
        assert shown.controls == tuple(stored["controls"]) and shown.controls_count >= 1
        assert not set(shown.canary) & set(shown.controls)
    # A plan stored before sizes were kept is shown without one, not with a guess.
    old = {k: v for k, v in plan.items() if k != "stratum_sizes"}
    assert [s.size for s in status_strata_of(old)] == [None, None]
    assert status_strata_of({"waves": []}) == ()


def test_rollout_status_strata_stay_under_the_max_payload_however_many_there_are() -> None:
    ids = [f"node-{i:05d}".ljust(64, "x") for i in range(400)]
    stored = [
        {"profile": f"p{i}", "supplier": "acme", "stack": "a" * 64,
         "canary": ids[:200], "controls": ids[200:]}
        for i in range(MAX_ITEMS)
    ]  # fmt: skip
    plan = {"strata": stored, "stratum_sizes": [4000] * MAX_ITEMS}
    strata = status_strata_of(plan)
    assert len(strata) == MAX_ITEMS
    assert all(s.canary_count == s.controls_count == 200 and s.size == 4000 for s in strata)
    assert all(1 <= len(s.canary) == len(s.controls) < 200 for s in strata)
    state = _rollout_state(strata)
    body = make_envelope(RolloutStatusAnswered(rollout=state), source="/t").to_json()
    assert len(body) < NATS_MAX_PAYLOAD
    # A few strata name up to MAX_SHOWN ids each.
    few = status_strata_of({"strata": stored[:2]})
    assert [len(s.canary) for s in few] == [MAX_SHOWN, MAX_SHOWN]


def _rollout_state(strata: tuple[PlanStratum, ...]) -> RolloutState:
    at = datetime(2026, 11, 29, tzinfo=UTC)
    return RolloutState(
        rollout_id="r-1",
        intent_id=uuid.UUID(int=1),
        stack_hash="a" * 64,
        change_class="standard",
        dry_run=False,
        state="running",
        plan_hash="0" * 64,
        approvals=(),
        approvals_needed=0,
        reason="",
        created_at=at,
        updated_at=at,
        deferred={},
        waves=(),
        nodes_by_step={},
        strata=strata,
    )
