"""An intent becomes a rollout, or a refusal naming every reason (issue 10, deliverables 2, 4,
5 and 9).

Runs in the worker, under the intent's lease, after the fleet was fetched from the inventory
(``fleet.query``): checks what the domain cannot see (the bundle is attested, no other live
rollout holds a node), plans with ``domain.plan``, and records the rollout, its waves, the
audit lines and the events in one transaction. A refusal is recorded on the intent and in the
audit trail, and announced as ``rollout.halted`` (``halted_by: policy``) under the rollout id
the intent would have had: no event says "refused" in v1, and a halted-before-start rollout
is what an operator waiting on the intent must hear about.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from lockstep_common import subjects
from lockstep_common.canonical import canonical_json
from lockstep_common.compatibility.table import CompatibilityRules
from lockstep_common.events.v1 import (
    FleetNode,
    IntentSubmitted,
    RolloutHalted,
    RolloutPlanned,
    WavePlan,
    WaveStratum,
)
from lockstep_common.maintenance import Schedule
from lockstep_common.vocabulary import ChangeClass, Component, clip_text
from lockstep_planner.domain.classes import ClassPolicy, Policy
from lockstep_planner.domain.compatibility import check_target
from lockstep_planner.domain.fabric import FabricConflict, Lifecycle, claim
from lockstep_planner.domain.fleet import Node, Pool
from lockstep_planner.domain.intake import (
    bundle_of,
    current_versions,
    installable,
    node_of,
    stack_of,
)
from lockstep_planner.domain.judgeable import GateMinimum
from lockstep_planner.domain.plan import Plan, PlanRequest, plan
from lockstep_planner.domain.plan_hash import canonical_plan, plan_difference, plan_hash
from lockstep_planner.domain.refusal import PlanRefused, some
from lockstep_planner.domain.rollout import RolloutState, WaveState
from lockstep_planner.domain.scope import AT_TARGET, DEFERRED, in_scope
from lockstep_planner.domain.windows import declared_windows
from lockstep_planner.fabric_domains import fresh
from lockstep_planner.lifecycle import PLANNER, Timing, note, start
from lockstep_planner.maintenance import schedules
from lockstep_planner.store import BundleRow, IntentRow, PlannerTx, RolloutRow, WaveRow
from lockstep_redfish.bank import keeps_previous_image
from lockstep_redfish.profile import BmcProfile

log = logging.getLogger(__name__)
BUDGET_SETTING = "LOCKSTEP_PLANNER_DEFAULT_MAX_UNAVAILABLE"
"""Where every pool's budget is set (``settings.default_max_unavailable``)."""


@dataclass(frozen=True, slots=True)
class Planning:
    """What planning depends on besides the intent and the fleet."""

    policy: Policy
    default_max_unavailable: int
    timing: Timing = field(default_factory=Timing)
    approvers: Mapping[str, Ed25519PublicKey] = field(default_factory=dict)
    """The approvers trust store; empty: no approval verifies (fails closed)."""
    rules: CompatibilityRules = field(kw_only=True)
    """The compatibility table the inventory judges drift by: a target breaking it is refused."""
    gate_minimum: GateMinimum | None = field(default=None, kw_only=True)
    """The healthgate policy's minimum sample per stratum; a plan that cannot meet it is
    refused (``domain.judgeable``)."""
    bmc_profiles: Mapping[str, BmcProfile] = field(default_factory=dict, kw_only=True)
    """Hardware profile -> the BMC profile its nodes' BMCs speak (``settings.bmc_profiles``):
    whose answer orders a component reversible or one-way (``reversible``)."""

    def reversible(self, hardware: str, component: Component) -> bool | None:
        """Does the BMC of ``hardware`` keep ``component``'s previous image to run again? None:
        no BMC profile is configured for it (the bundle's ``banks`` declaration stands)."""
        profile = self.bmc_profiles.get(hardware)
        return None if profile is None else keeps_previous_image(profile, component)


def asked(intent: IntentSubmitted) -> dict[str, Any]:
    """What an intent asks, as JSON: target, scope (each axis sorted), class and strategy; not
    who asked, when, its id or its change ticket. Stored with the plan, so ``rollout start
    --plan`` can ask exactly that again."""
    return {
        "stack_hash": intent.stack_hash,
        "scope": {k: sorted(v) for k, v in intent.scope.model_dump(mode="json").items()},
        "change_class": str(intent.change_class),
        "strategy": intent.strategy.model_dump(mode="json", exclude_none=True),
    }


def seed_of(intent: IntentSubmitted) -> str:
    """The plan's seed: a digest of what the intent asks (:func:`asked`). Planning the same
    request over the same fleet gives the same plan and hash, so the plan a dry run showed is
    the one ``rollout start --plan`` starts; an intent asking anything else gets another seed,
    and so another hash."""
    content = asked(intent)
    # Canonical JSON takes no floats (RFC 8785 numbers differ across languages); the wave
    # fractions are hashed as Python's shortest round-trip text of each.
    fractions = content["strategy"].get("wave_fractions")
    if fractions is not None:
        content["strategy"]["wave_fractions"] = [repr(f) for f in fractions]
    return hashlib.sha256(canonical_json(content)).hexdigest()


def stratum_key(node: Node) -> str:
    """How a stratum is named in ``wave.planned`` (profile/supplier/stack prefix)."""
    return f"{node.profile}/{node.supplier}/{node.stack[:12]}"


def _request(
    intent: IntentSubmitted,
    bundle: BundleRow,
    fleet: Sequence[FleetNode],
    planning: Planning,
    now: datetime,
    deferred: Mapping[str, str],
    schedules: Mapping[tuple[str, str], Schedule] | None = None,
) -> tuple[PlanRequest, dict[str, Node], tuple[str, ...]]:
    """The plan request, the planning model of every node, and the compatibility rules the
    target would break (judged over the readable nodes: those are the ones that could move)."""
    target = stack_of(bundle.components)
    check = check_target(
        (n for n in fleet if n.readable is True), target, rules=planning.rules, today=now.date()
    )
    nodes = tuple(
        node_of(n, target, bundle.stack_hash, remedied=n.node_id in check.remedied) for n in fleet
    )
    # The operator's budget; the intent's strategy may only lower it (``domain.plan``).
    # Maintenance windows: what operators declared per pool and site (``maintenance.py``).
    windows = declared_windows(nodes, schedules or {}, now=now)
    pools = {
        n.pool: Pool(
            n.pool, planning.default_max_unavailable, windows[n.pool], set_by=BUDGET_SETTING
        )
        for n in nodes
    }
    scoped = [f for f, n in zip(fleet, nodes, strict=True) if in_scope(n, intent.scope)]
    return (
        PlanRequest(
            fleet=nodes,
            pools=pools,
            bundle=bundle_of(bundle.stack_hash, bundle.components, planning.reversible),
            scope=intent.scope,
            change_class=ChangeClass(intent.change_class),
            policy=planning.policy[ChangeClass(intent.change_class)],
            seed=seed_of(intent),
            strategy=intent.strategy,
            current_versions=current_versions(scoped),
            deferred_domains=deferred,
            gate_minimum=planning.gate_minimum,
        ),
        {n.id: n for n in nodes},
        check.refusals,
    )


def control_of(
    controls: Sequence[str], moved: set[str], gated: Sequence[str], size: int
) -> tuple[str, ...]:
    """A wave's control for one stratum: the chosen controls still untouched when it runs (they
    move last, if at all). When none is left, as in the wave that moves the controls
    themselves, up to ``size`` nodes of the stratum that earlier waves moved: they already
    passed their gate on the target stack, so the healthgate still compares like with like
    over the same window instead of seeing no control at all, which is never a pass."""
    untouched = tuple(c for c in controls if c not in moved)
    return untouched or tuple(sorted(gated)[: max(size, len(controls))])


def _wave_rows(rollout_id: str, made: Plan, nodes: dict[str, Node]) -> list[WaveRow]:
    controls: dict[str, list[str]] = defaultdict(list)
    for cover in made.strata:
        key = f"{cover.stratum.profile}/{cover.stratum.supplier}/{cover.stratum.stack[:12]}"
        controls[key].extend(cover.controls)
    moved: set[str] = set()
    gated: dict[str, list[str]] = defaultdict(list)  # stratum -> nodes of earlier waves
    rows = []
    caps = dict(made.max_unavailable)
    for wave in made.waves:
        moved.update(wave.node_ids)
        by_stratum: dict[str, list[str]] = defaultdict(list)
        for node_id in wave.node_ids:
            by_stratum[stratum_key(nodes[node_id])].append(node_id)
        strata = tuple(
            WaveStratum(
                key=key,
                node_ids=tuple(ids),
                control_ids=control_of(controls.get(key, ()), moved, gated[key], len(ids)),
            )
            for key, ids in sorted(by_stratum.items())
        )
        for key, ids in by_stratum.items():
            gated[key].extend(ids)
        components = installable(c for s in wave.stages for c in s.components)
        pools = {nodes[i].pool for i in wave.node_ids}
        soak = wave.stages[-1].soak_s if wave.stages else 0
        rows.append(
            WaveRow(
                rollout_id=rollout_id,
                number=wave.number,
                state=WaveState.PENDING,
                node_ids=wave.node_ids,
                components=components,
                max_unavailable=min((caps.get(p, 1) for p in pools), default=1),
                failure_budget=wave.failure_budget,
                soak_s=soak,
                planned_s=max(0, wave.end_s - wave.start_s - soak),
                strata=strata,
            )
        )
    return rows


def _fabric_section(made: Plan, nodes: Mapping[str, Node]) -> dict[str, Any]:
    """For a bundle moving switch firmware: the domains the rollout moves (deferred ones
    included) with their nodes, and the domains already on the bundle (see
    ``fabric_domains.fabric_plan``). ``deferred`` is filled in by :func:`_deferred_waves`."""
    moved: dict[str, list[str]] = defaultdict(list)
    for node_id in [i for w in made.waves for i in w.node_ids] + [
        e.node_id for e in made.excluded if e.reason.startswith(DEFERRED)
    ]:
        domain = nodes[node_id].fabric_domain
        if domain is not None:
            moved[domain].append(node_id)
    reasons: dict[str, set[str]] = defaultdict(set)  # domain -> why its nodes stay put
    for e in made.excluded:
        domain = nodes[e.node_id].fabric_domain
        if domain is not None:
            reasons[domain].add(e.reason)
    whole = [d for d, why in reasons.items() if why == {AT_TARGET} and d not in moved]
    return {
        "domains": {d: sorted(ids) for d, ids in sorted(moved.items())},
        "at_target": sorted(whole),
        "deferred": {},
    }


def _deferred_waves(
    rollout_id: str,
    made: Plan,
    nodes: Mapping[str, Node],
    earlier: Sequence[WaveRow],
    fabric: dict[str, Any],
    policy: ClassPolicy,
) -> list[WaveRow]:
    """One wave per occupied fabric domain, after every planned wave: it is released once the
    domain is AVAILABLE (``lifecycle.advance``), after the canary and the other waves passed
    their gates on the same stack, and is gated like them against nodes of its stratum that
    already moved."""
    by_domain: dict[str, list[str]] = defaultdict(list)
    why: dict[str, str] = {}
    for e in made.excluded:
        domain = nodes[e.node_id].fabric_domain
        if e.reason.startswith(DEFERRED) and domain is not None:
            by_domain[domain].append(e.node_id)
            why[domain] = e.reason[len(DEFERRED) :]
    components = tuple(dict.fromkeys(c for w in earlier for c in w.components))
    caps = dict(made.max_unavailable)
    gated: dict[str, list[str]] = defaultdict(list)
    for wave in earlier:
        for node_id in wave.node_ids:
            gated[stratum_key(nodes[node_id])].append(node_id)
    rows = []
    for number, (domain, ids) in enumerate(sorted(by_domain.items()), start=len(earlier)):
        by_stratum: dict[str, list[str]] = defaultdict(list)
        for node_id in sorted(ids):
            by_stratum[stratum_key(nodes[node_id])].append(node_id)
        pools = {nodes[i].pool for i in ids}
        rows.append(
            WaveRow(
                rollout_id=rollout_id,
                number=number,
                state=WaveState.PENDING,
                node_ids=tuple(sorted(ids)),
                components=components,
                max_unavailable=min((caps.get(p, 1) for p in pools), default=1),
                failure_budget=math.floor(round(policy.failure_budget * len(ids), 6)),
                soak_s=policy.wave_soak_s,
                planned_s=max((w.planned_s for w in earlier), default=0),
                strata=tuple(
                    WaveStratum(
                        key=key,
                        node_ids=tuple(members),
                        control_ids=control_of((), set(), sorted(gated[key]), len(members)),
                    )
                    for key, members in sorted(by_stratum.items())
                ),
            )
        )
        fabric["deferred"][str(number)] = {"domain": domain, "reason": why[domain]}
    return rows


def _described(made: Plan, rows: list[WaveRow], sites: list[str]) -> dict[str, Any]:
    """The stored plan: its hashed content plus what ``--dry-run`` and ``status`` show."""
    return {
        **canonical_plan(made),
        "sites": sites,
        "starts_at": made.starts_at.isoformat(),
        "makespan_s": made.makespan_s,
        "lower_bound_s": made.lower_bound_s,
        "estimates": [
            {"number": w.number, "start_s": w.start_s, "end_s": w.end_s} for w in made.waves
        ],
        "components": {str(r.number): list(r.components) for r in rows},
        # Kept beside the hashed strata, in their order: a stratum's size is not plan content.
        "stratum_sizes": [c.size for c in made.strata],
    }


async def _not_reviewed(tx: PlannerTx, reviewed_hash: str, made: Plan) -> list[str]:
    """Why ``made`` is not the plan an approver reviewed (``rollout start --plan``); [] if it
    is. Intent content decides the seed, so only a changed fleet (or policy) changes it."""
    now_hash = plan_hash(made)
    if now_hash == reviewed_hash:
        return []
    reviewed = await tx.plan_with_hash(reviewed_hash)
    if reviewed is None:
        return [
            f"plan {reviewed_hash} was never made by this planner: review one with "
            "`lockstep rollout plan` and start that"
        ]
    difference = plan_difference(reviewed, canonical_plan(made))
    return [
        f"the plan changed since it was reviewed (plan {reviewed_hash[:12]}, now "
        f"{now_hash[:12]}): {difference}; review the new plan"
    ]


async def refuse(tx: PlannerTx, row: IntentRow, reasons: Sequence[str], now: datetime) -> None:
    """Close the intent as refused, naming every reason, and say so: in the audit trail, and
    with ``rollout.halted`` unless it was a dry run (a plan that was only looked at halts no
    rollout, and the consumers of ``rollout.halted`` must not hear of one; issue 31)."""
    await tx.decide_intent(row.intent_id, "refused", reasons, now)
    text = "; ".join(reasons)
    await note(tx, row.rollout_id, PLANNER, "refused", text, now)
    log.info("intent %s refused: %s", row.intent_id, text)
    if row.intent.dry_run:
        return
    tx.events.emit(
        subjects.rollout_halted(row.rollout_id),
        RolloutHalted(
            rollout_id=row.rollout_id,
            wave=0,
            reason=clip_text(f"intent {row.intent_id} refused: {text}"),
            halted_by="policy",
        ),
        about=row.rollout_id,
        correlation_id=str(row.intent_id),
    )


@dataclass(frozen=True, slots=True)
class Decision:
    """What planning an intent comes to, before anything is written: the rollout with its waves,
    or every reason it cannot be."""

    reasons: tuple[str, ...]
    rollout: RolloutRow | None = None
    waves: tuple[WaveRow, ...] = ()
    made: Plan | None = None


async def decide(
    tx: PlannerTx,
    row: IntentRow,
    fleet: Sequence[FleetNode],
    planning: Planning,
    now: datetime,
) -> Decision:
    """Plan ``row``'s intent over ``fleet``: reads ``tx`` (bundles, fabric domains, windows,
    reviewed plans, the nodes live rollouts hold) and writes nothing, so a dry run
    (``rollout plan``) answers with exactly what a start would do."""
    intent = row.intent
    bundle = await tx.bundle(intent.stack_hash)
    if bundle is None:
        return Decision((f"bundle with stack {intent.stack_hash} is not attested",))
    moves_fabric = bundle_of(bundle.stack_hash, bundle.components).moves_fabric
    domains = await tx.fabric_domains(
        {n.fabric_domain for n in fleet if n.fabric_domain} if moves_fabric else ()
    )
    occupied = {
        d: f"fabric domain {d} is OCCUPIED by a job; its nodes follow in a wave of their own "
        "once it is AVAILABLE"
        for d, r in domains.items()
        if r.domain.lifecycle is Lifecycle.OCCUPIED
    }
    request, nodes, refusals = _request(
        intent, bundle, fleet, planning, now, occupied, schedules(await tx.maintenance())
    )
    reasons = list(refusals)
    try:
        made = plan(request, now=now)
    except PlanRefused as exc:
        reasons.extend(exc.reasons)
        made = None
    fabric: dict[str, Any] = {}
    if made is not None and moves_fabric:
        fabric = _fabric_section(made, nodes)
        for domain_id in sorted(fabric["domains"]):
            found = domains.get(domain_id)
            try:
                claim(
                    found.domain if found else fresh(domain_id), intent.stack_hash, row.rollout_id
                )
            except FabricConflict as exc:
                reasons.append(str(exc))
    if made is not None and intent.plan_hash is not None:
        reasons.extend(await _not_reviewed(tx, intent.plan_hash, made))
    if made is not None:
        moving = [i for w in made.waves for i in w.node_ids]
        busy = await tx.busy_nodes(moving)
        if busy:
            held = sorted(set(busy.values()))
            reasons.append(f"node(s) already held by live rollout(s) {some(held)}: {some(busy)}")
    if reasons or made is None:
        return Decision(tuple(reasons))
    policy = planning.policy[ChangeClass(intent.change_class)]
    waves = _wave_rows(row.rollout_id, made, nodes)
    waves += _deferred_waves(row.rollout_id, made, nodes, waves, fabric, policy)
    sites = sorted({nodes[i].site for w in waves for i in w.node_ids})
    rollout = RolloutRow(
        rollout_id=row.rollout_id,
        intent_id=row.intent_id,
        stack_hash=intent.stack_hash,
        change_class=str(intent.change_class),
        scope=intent.scope.model_dump(mode="json"),
        dry_run=intent.dry_run,
        state=RolloutState.PLANNED,
        plan_hash=plan_hash(made),
        plan={**_described(made, waves, sites), "fabric": fabric, "intent": asked(intent)},
        approvals_needed=policy.approvals.count,
        created_at=now,
        updated_at=now,
    )
    return Decision((), rollout, tuple(waves), made)


async def plan_intent(
    tx: PlannerTx,
    row: IntentRow,
    fleet: Sequence[FleetNode],
    planning: Planning,
    now: datetime,
) -> RolloutRow | None:
    """Plan one claimed intent inside ``tx`` (:func:`decide`) and record the decision: the
    rollout, or None when refused."""
    intent = row.intent
    decision = await decide(tx, row, fleet, planning, now)
    rollout, made = decision.rollout, decision.made
    if rollout is None or made is None:
        await refuse(tx, row, decision.reasons, now)
        return None
    waves = list(decision.waves)
    fabric = rollout.plan["fabric"]
    policy = planning.policy[ChangeClass(intent.change_class)]
    await tx.add_rollout(rollout, [] if intent.dry_run else waves)
    await tx.decide_intent(row.intent_id, "planned", (), now)
    tx.events.emit(
        subjects.rollout_planned(row.rollout_id),
        RolloutPlanned(
            rollout_id=row.rollout_id,
            intent_id=row.intent_id,
            stack_hash=intent.stack_hash,
            change_class=intent.change_class,
            waves=tuple(WavePlan(number=w.number, node_ids=w.node_ids) for w in waves),
            dry_run=intent.dry_run,
        ),
        about=row.rollout_id,
        correlation_id=str(row.intent_id),
    )
    excluded = made.excluded
    await note(
        tx,
        row.rollout_id,
        PLANNER,
        "planned",
        f"plan {rollout.plan_hash}: {len(waves)} wave(s), "
        f"{sum(len(w.node_ids) for w in waves)} node(s), {len(excluded)} excluded"
        + (" (" + "; ".join(sorted({e.reason for e in excluded}))[:400] + ")" if excluded else "")
        + (
            f", {len(fabric['deferred'])} occupied fabric domain(s) deferred to their own wave(s)"
            if fabric.get("deferred")
            else ""
        )
        + f", estimated {made.makespan_s} s"
        + (", dry run: nothing released" if intent.dry_run else ""),
        now,
    )
    if intent.dry_run:
        return rollout
    if policy.approvals.count:
        # The change ticket (approval_ref) is recorded with the intent; what counts are signed
        # approvals of this plan's hash (`lockstep rollout approve`).
        await note(
            tx,
            row.rollout_id,
            PLANNER,
            "awaiting approval",
            f"change class {intent.change_class} needs {policy.approvals.count} signed "
            f"approval(s) of plan {rollout.plan_hash}"
            + (" from distinct approvers" if policy.approvals.distinct_approvers else ""),
            now,
        )
        return rollout
    return await start(tx, rollout, planning.timing, now, f"pre-approved ({intent.change_class})")
