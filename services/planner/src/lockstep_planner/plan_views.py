"""A plan as the operator is answered it over the bus (``rollout plan|start``), pure.

A 12,500-node plan's node lists are over NATS's 1 MiB max payload (issue 26, item 3), so the
answer is the plan's summary (waves with their counts, strata with their first canary and
control nodes, deferred fabric domains, exclusions counted by reason, the plan hash) and where
each node goes comes in pages: node ids in node id order with, for each, its wave number or
``-1-i`` for the summary's ``excluded[i]``, each page under ``PLAN_PAGE_BYTES`` of ids. Both
are read from the plan as stored (``planning._described``: a dry run builds the same document
without storing it), so a page of a dry run and of a started rollout mean the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from lockstep_common.events.v1 import (
    MAX_SHOWN,
    PLAN_PAGE_BYTES,
    DeferredWave,
    Exclusions,
    PlanAsk,
    PlanStratum,
    PlanSummary,
    PlanWaveSummary,
)

PER_NODE_BYTES = 8
"""JSON overhead of one node in a page: its quotes and commas, and its place (a wave number)."""


def _reasons(plan: Mapping[str, Any]) -> list[str]:
    """Exclusion reasons in first-seen order: the index a page's place refers to."""
    return list(dict.fromkeys(str(e["reason"]) for e in plan.get("excluded", [])))


def summary_of(plan: Mapping[str, Any], plan_hash: str, bundle: str) -> PlanSummary:
    """The plan without its node lists. ``bundle`` names the target (``ID@VERSION``)."""
    times = {int(e["number"]): e for e in plan.get("estimates", [])}
    components = plan.get("components", {})
    fabric = plan.get("fabric") or {}
    counts: dict[str, int] = {}
    for e in plan.get("excluded", []):
        counts[str(e["reason"])] = counts.get(str(e["reason"]), 0) + 1
    return PlanSummary(
        plan_hash=plan_hash,
        ask=PlanAsk.model_validate(plan["intent"], strict=False),
        bundle=bundle,
        starts_at=datetime.fromisoformat(plan["starts_at"]),
        makespan_s=int(plan["makespan_s"]),
        lower_bound_s=int(plan["lower_bound_s"]),
        waves=tuple(
            PlanWaveSummary(
                number=int(w["number"]),
                nodes=len(w["nodes"]),
                components=tuple(
                    components.get(str(w["number"]))
                    or dict.fromkeys(c for s in w["stages"] for c in s["components"])
                ),
                failure_budget=int(w["failure_budget"]),
                start_s=int(times.get(int(w["number"]), {}).get("start_s", 0)),
                end_s=int(times.get(int(w["number"]), {}).get("end_s", 0)),
            )
            for w in plan["waves"]
        ),
        deferred=tuple(
            DeferredWave(
                number=int(number),
                domain=wait["domain"],
                reason=wait["reason"],
                nodes=len(fabric.get("domains", {}).get(wait["domain"], [])),
            )
            for number, wait in sorted(
                fabric.get("deferred", {}).items(), key=lambda item: int(item[0])
            )
        ),
        strata=strata_of(plan),
        excluded=tuple(Exclusions(reason=r, nodes=counts[r]) for r in _reasons(plan)),
        nodes=len(places_of(plan)),
    )


STATUS_NODE_IDS = 4096
"""Canary and control node ids named in all of a ``rollout.status`` answer's strata together:
4,096 ids of 64 characters are under 300 kB, so the answer stays under NATS's 1 MiB however
many strata the plan has."""


def strata_of(plan: Mapping[str, Any], shown: int = MAX_SHOWN) -> tuple[PlanStratum, ...]:
    """The plan's strata as stored, each with its first ``shown`` canary and control nodes
    and whole counts (a 12,500-node fleet's lists would not fit one answer), and its size where
    the plan kept one (plans stored before sizes were kept have none)."""
    sizes = plan.get("stratum_sizes") or []
    return tuple(
        PlanStratum(
            profile=s["profile"],
            supplier=s["supplier"],
            stack=s["stack"],
            canary=tuple(s["canary"][:shown]),
            canary_count=len(s["canary"]),
            controls=tuple(s["controls"][:shown]),
            controls_count=len(s["controls"]),
            size=int(sizes[i]) if i < len(sizes) else None,
        )
        for i, s in enumerate(plan.get("strata") or [])
    )


def status_strata_of(plan: Mapping[str, Any]) -> tuple[PlanStratum, ...]:
    """:func:`strata_of` for ``rollout.status``: the ids shown shrink as strata grow in number,
    to at most ``STATUS_NODE_IDS`` in all (at least one of each kind per stratum; counts whole)."""
    count = len(plan.get("strata") or [])
    return strata_of(plan, max(1, min(MAX_SHOWN, STATUS_NODE_IDS // (2 * max(count, 1)))))


def places_of(plan: Mapping[str, Any]) -> list[tuple[str, int]]:
    """Every node the plan places, in node id order, with its wave number or ``-1-i`` for the
    ``i``-th exclusion reason."""
    index = {r: i for i, r in enumerate(_reasons(plan))}
    where = {str(n): int(w["number"]) for w in plan["waves"] for n in w["nodes"]}
    for e in plan.get("excluded", []):
        where.setdefault(str(e["node"]), -1 - index[str(e["reason"])])
    return sorted(where.items())


def page_of(
    plan: Mapping[str, Any], offset: int, budget: int = PLAN_PAGE_BYTES
) -> tuple[tuple[str, ...], tuple[int, ...], int | None]:
    """The nodes and places from ``offset`` on, as many as fit ``budget`` bytes of JSON (at
    least one), and the offset of the next page (None: this was the last)."""
    places = places_of(plan)
    nodes: list[str] = []
    where: list[int] = []
    used = 0
    for node, place in places[offset:]:
        used += len(node) + PER_NODE_BYTES
        if nodes and used > budget:
            break
        nodes.append(node)
        where.append(place)
    end = offset + len(nodes)
    return tuple(nodes), tuple(where), end if end < len(places) else None
