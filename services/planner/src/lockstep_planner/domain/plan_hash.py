"""The plan hash: what an approval is bound to (issue 10: "a changed plan needs a new approval").

SHA-256 over the canonical JSON (RFC 8785, ``lockstep_common.canonical``) of everything that
decides what happens to which node: class, target, seed, waves with their nodes, layers and
failure budgets, soaks, budgets, canary and controls, exclusions. Estimated times and batches are
left out on purpose: they move with ``now`` and with the packing, and an approval must survive a
replan of the same intent a minute later while any change in *what* moves voids it.
"""

from __future__ import annotations

import hashlib
from typing import Any

from lockstep_common.canonical import canonical_json
from lockstep_planner.domain.plan import Plan


def canonical_plan(plan: Plan) -> dict[str, Any]:
    """The hashed content of ``plan`` as JSON-ready values (integers and strings only)."""
    return {
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


def plan_hash(plan: Plan) -> str:
    """Lower-case hex SHA-256 of :func:`canonical_plan`."""
    return hashlib.sha256(canonical_json(canonical_plan(plan))).hexdigest()
