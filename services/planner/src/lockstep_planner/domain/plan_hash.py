"""The plan hash: what an approval is bound to (issue 10: "a changed plan needs a new approval").

SHA-256 over the canonical JSON (RFC 8785, ``lockstep_common.canonical``) of everything that
decides what happens to which node: class, target, seed, waves with their nodes, layers and
failure budgets, soaks, budgets, canary and controls, exclusions, and the components whose
flip-back after a tripped gate re-flashes the previous image (a forced downgrade: the approver
signs for it). Estimated times and batches are
left out on purpose: they move with ``now`` and with the packing, and an approval must survive a
replan of the same intent a minute later while any change in *what* moves voids it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from lockstep_common.canonical import canonical_json
from lockstep_planner.domain.plan import Plan


def canonical_plan(plan: Plan) -> dict[str, Any]:
    """The hashed content of ``plan`` as JSON-ready values (integers and strings only).
    ``reflash`` is there only when the plan re-flashes something, so a plan without it keeps
    the hash (and the approvals) it had before the field."""
    content: dict[str, Any] = {
        "change_class": str(plan.change_class),
        "stack": plan.stack,
        "seed": plan.seed,
        "waves": [
            {
                "number": w.number,
                "nodes": list(w.node_ids),
                "failure_budget": w.failure_budget,
                "stages": [
                    {
                        "kind": str(s.kind),
                        "power_side": None if s.power_side is None else str(s.power_side),
                        "components": list(s.components),
                        "soak_s": s.soak_s,
                    }
                    for s in w.stages
                ],
            }
            for w in plan.waves
        ],
        "strata": [
            {
                "profile": c.stratum.profile,
                "supplier": c.stratum.supplier,
                "stack": c.stratum.stack,
                "canary": list(c.canary),
                "controls": list(c.controls),
            }
            for c in plan.strata
        ],
        "excluded": [{"node": e.node_id, "reason": e.reason} for e in plan.excluded],
        "max_unavailable": dict(plan.max_unavailable),
        "fabric_domains_at_once": plan.fabric_domains_at_once,
    }
    if plan.reflash:
        content["reflash"] = list(plan.reflash)
    return content


def plan_hash(plan: Plan) -> str:
    """Lower-case hex SHA-256 of :func:`canonical_plan`."""
    return hashlib.sha256(canonical_json(canonical_plan(plan))).hexdigest()


def _nodes(content: Mapping[str, Any]) -> dict[str, str]:
    """Node -> where a plan puts it: ``wave N`` or its exclusion reason."""
    where = {n: f"wave {w['number']}" for w in content.get("waves", []) for n in w["nodes"]}
    where.update((e["node"], e["reason"]) for e in content.get("excluded", []))
    return where


def _named(ids: list[str], shown: int = 5) -> str:
    more = f" and {len(ids) - shown} more" if len(ids) > shown else ""
    return ", ".join(sorted(ids)[:shown]) + more


def plan_difference(reviewed: Mapping[str, Any], now: Mapping[str, Any]) -> str:
    """What changed from the reviewed plan to ``now`` (:func:`canonical_plan` shaped; keys the
    stored plan has beyond those are not compared), in one line: the nodes that came, went or
    moved to another wave or exclusion, the strata, budgets and stages; empty when the hashed
    content is the same."""

    def changed(*keys: str) -> list[str]:
        return [
            f"{k} {reviewed.get(k)} -> {now.get(k)}" for k in keys if reviewed.get(k) != now.get(k)
        ]

    parts = changed("change_class", "stack", "seed")
    before, after = _nodes(reviewed), _nodes(now)
    gone = [n for n in before if n not in after]
    new = [n for n in after if n not in before]
    moved = [n for n in before if n in after and before[n] != after[n]]
    if gone:
        parts.append(f"{len(gone)} node(s) no longer in the plan: {_named(gone)}")
    if new:
        parts.append(f"{len(new)} node(s) new to it: {_named(new)}")
    if moved:
        shown = "; ".join(f"{n}: {before[n]} -> {after[n]}" for n in sorted(moved)[:3])
        more = f" and {len(moved) - 3} more" if len(moved) > 3 else ""
        parts.append(f"{len(moved)} node(s) placed otherwise ({shown}{more})")

    def strata(content: Mapping[str, Any]) -> set[tuple[str, str, str]]:
        return {(s["profile"], s["supplier"], s["stack"][:12]) for s in content.get("strata", [])}

    if strata(reviewed) != strata(now):
        parts.append(
            f"strata {len(strata(reviewed))} -> {len(strata(now))} "
            f"(new: {_named(['/'.join(s) for s in strata(now) - strata(reviewed)]) or 'none'})"
        )
    parts.extend(changed("max_unavailable", "fabric_domains_at_once", "reflash"))
    if not parts and any(reviewed.get(k) != v for k, v in now.items()):
        parts.append("the controls, stages, soaks or failure budgets")
    return "; ".join(parts)
