"""The plan hash binds approvals to what moves, not to when the estimate was made."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from datetime import timedelta

import pytest

from lockstep_common.canonical import canonical_json
from lockstep_common.events.v1 import Strategy
from lockstep_planner.domain.fleet import Pool
from lockstep_planner.domain.plan import PlanRequest, plan
from lockstep_planner.domain.plan_hash import canonical_plan, plan_hash

from .fleets import NOW, nightly, node, request

pytestmark = pytest.mark.unit
NODES = [node(i, rack=f"r{i % 5}") for i in range(60)]


def test_the_hash_is_hex_sha256_of_integer_only_canonical_json() -> None:
    result = plan(request(NODES), now=NOW)
    digest = plan_hash(result)
    assert re.fullmatch(r"[0-9a-f]{64}", digest)
    content = canonical_plan(result)
    assert json.loads(canonical_json(content)) == content
    assert content["waves"][0]["nodes"] == list(result.waves[0].node_ids)


def test_replanning_later_keeps_the_hash_so_an_approval_survives() -> None:
    windowed = request(NODES, pools={"p0": Pool("p0", 5, nightly())})
    first = plan(windowed, now=NOW)
    later = plan(windowed, now=NOW + timedelta(hours=3, minutes=7))
    assert first.waves[0].stages[0].batches != later.waves[0].stages[0].batches  # times moved
    assert plan_hash(first) == plan_hash(later)


BASE = request(NODES)


@pytest.mark.parametrize(
    "changed",
    [
        replace(BASE, seed="other"),
        replace(BASE, fleet=tuple(NODES[:-1])),
        replace(BASE, strategy=Strategy(soak_seconds=99_999)),
        replace(BASE, strategy=Strategy(max_unavailable=1)),
    ],
    ids=["seed", "one node fewer", "longer soak", "smaller budget"],
)
def test_any_change_in_what_moves_or_how_voids_the_hash(changed: PlanRequest) -> None:
    assert plan_hash(plan(changed, now=NOW)) != plan_hash(plan(BASE, now=NOW))
