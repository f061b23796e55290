"""A 12,500-node plan answered over the bus within NATS's 1 MiB max payload (issue 26, item 3):
its summary and pages of node places, each under the limit, that put every node back where the
plan has it."""

from __future__ import annotations

import json
import uuid

import pytest

from lockstep_common.compatibility.files import packaged_rules
from lockstep_common.envelope import make_envelope
from lockstep_common.events.v1 import PLAN_PAGE_BYTES, RolloutPlanAnswered
from lockstep_common.vocabulary import ChangeClass
from lockstep_planner.adapters.policy_file import packaged_policy
from lockstep_planner.handlers import on_bundle_attested, rollout_id_of
from lockstep_planner.lifecycle import Timing
from lockstep_planner.plan_views import page_of, summary_of
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
