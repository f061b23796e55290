"""An intent becomes a plan: scope, exclusions, canary, waves, stages, times (issue 10).

``plan()`` is pure: the fleet, pools and bundle come in as values, ``now`` is a parameter, and
the same request with the same seed gives the same plan, hash included, in any process.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from lockstep_common.events.v1 import ScopeSelector, Strategy
from lockstep_common.vocabulary import ChangeClass
from lockstep_planner.domain.bounds import stage_bound
from lockstep_planner.domain.canary import StratumCover, choose_canary
from lockstep_planner.domain.class_rules import bundle_refusals
from lockstep_planner.domain.classes import ClassPolicy, fraction_problems
from lockstep_planner.domain.fleet import Bundle, Node, Pool
from lockstep_planner.domain.judgeable import GateMinimum, unjudgeable
from lockstep_planner.domain.refusal import PlanRefused, some
from lockstep_planner.domain.schedule import Stage, place_stage
from lockstep_planner.domain.scope import Exclusion, select
from lockstep_planner.domain.seeded import rank
from lockstep_planner.domain.stages import FABRIC_SLOTS, StageSpec, stage_specs
from lockstep_planner.domain.units import Unit, units_of
from lockstep_planner.domain.waves import assign_waves
from lockstep_planner.domain.windows import Windows


@dataclass(frozen=True, slots=True)
class PlanRequest:
    """Everything a plan depends on."""

    fleet: tuple[Node, ...]
    pools: Mapping[str, Pool]
    bundle: Bundle
    scope: ScopeSelector
    change_class: ChangeClass
    policy: ClassPolicy
    seed: str
    """Fixes every tie; the service derives it from what the intent asks (``planning.seed_of``),
    so the same request over the same fleet gives the same plan."""
    strategy: Strategy = field(default_factory=Strategy)
    current_versions: Mapping[str, str] | None = None
    """Component -> version pinned now; a standard change's window is checked against it."""
    tested_revert: bool = False
    deferred_domains: Mapping[str, str] = field(default_factory=dict)
    """Fabric domain -> why its nodes wait (a job occupies it); they join no wave here."""
    gate_minimum: GateMinimum | None = None
    """The healthgate policy's minimum sample per stratum: a stratum whose canary or control
    cannot reach it is refused (``judgeable``). None: not checked (what-if tools)."""


@dataclass(frozen=True, slots=True)
class PlannedWave:
    """One gated wave; 0 is the canary."""

    number: int
    node_ids: tuple[str, ...]
    stages: tuple[Stage, ...]
    failure_budget: int
    """Failed nodes tolerated before the wave halts."""
    start_s: int
    end_s: int
    """Its last gate can judge it (last soak included)."""


@dataclass(frozen=True, slots=True)
class Plan:
    """A rollout plan. Times are seconds after ``starts_at`` and are estimates."""

    change_class: ChangeClass
    stack: str
    seed: str
    starts_at: datetime
    waves: tuple[PlannedWave, ...]
    strata: tuple[StratumCover, ...]
    excluded: tuple[Exclusion, ...]
    max_unavailable: tuple[tuple[str, int], ...]
    fabric_domains_at_once: int | None
    makespan_s: int
    lower_bound_s: int
    """No plan of these waves under these budgets, windows and soaks can finish sooner."""
    reflash: tuple[str, ...] = ()
    """Components whose flip-back after a tripped gate re-flashes the previous attested image
    (a forced downgrade: their BMC keeps no previous image to run, ``BundleComponent.reflash``),
    sorted; hashed, so an approval covers it, and handed to the updater with each wave."""


def plan(request: PlanRequest, *, now: datetime) -> Plan:
    """Plan ``request`` from ``now`` on.

    Raises:
        PlanRefused: naming every reason the intent cannot be planned as asked.
    """
    policy, strategy = request.policy, request.strategy
    reasons = bundle_refusals(
        request.change_class,
        policy,
        request.bundle.components,
        current=request.current_versions,
        tested_revert=request.tested_revert,
    )
    moving, excluded = select(
        request.fleet,
        request.scope,
        request.bundle,
        change_class=request.change_class,
        unfit_nodes=policy.unfit_nodes,
        reasons=reasons,
        deferred=request.deferred_domains if request.bundle.moves_fabric else None,
    )
    fractions = _fractions(policy, strategy, reasons)
    unknown = {n.pool for n in moving} - set(request.pools)
    if unknown:
        reasons.append(f"no budget for pool(s) {some(unknown)}: every pool needs max_unavailable")
    reasons.extend(_overrides(policy, strategy, request.pools, {n.pool for n in moving}))
    if reasons:
        raise PlanRefused(reasons)

    caps = {
        name: min(pool.max_unavailable, strategy.max_unavailable or pool.max_unavailable)
        for name, pool in request.pools.items()
    }
    if policy.max_fabric_domains_at_once is not None:
        caps[FABRIC_SLOTS] = policy.max_fabric_domains_at_once
    units = units_of(moving, by_domain=request.bundle.moves_fabric, seed=request.seed)
    canary = choose_canary(
        units,
        min_per_stratum=policy.canary_min_per_stratum,
        min_total=strategy.canary_nodes or 0,
        seed=request.seed,
    )
    if strategy.canary_nodes is not None:
        refusal = _canary_refusal(strategy.canary_nodes, units, policy, request.seed)
        if refusal:
            raise PlanRefused([refusal])
    if request.gate_minimum is not None:
        short = unjudgeable(canary.strata, request.gate_minimum)
        if short:
            raise PlanRefused(short)
    in_canary = {u.key for u in canary.units}
    buckets = {(n.site, n.rack) for n in moving}
    waves = assign_waves(
        canary.units,
        [u for u in units if u.key not in in_canary],
        fractions=fractions,
        controls=canary.control_ids,
        bucket_rank={b: rank(request.seed, f"rack:{b[0]}/{b[1]}") for b in buckets},
        min_per_stratum=policy.canary_min_per_stratum,
    )
    specs = [stage_specs(w, request.bundle, fabric_cap=caps.get(FABRIC_SLOTS)) for w in waves]
    windows = {name: Windows(pool.windows, now=now) for name, pool in request.pools.items()}
    reasons = _unplaceable([s for wave in specs for s in wave], caps, windows, request.pools)
    if reasons:
        raise PlanRefused(reasons)
    return _timed(request, now, waves, specs, caps, windows, canary.strata, excluded)


def _fractions(policy: ClassPolicy, strategy: Strategy, reasons: list[str]) -> tuple[float, ...]:
    if strategy.wave_fractions is None:
        return policy.wave_fractions
    reasons.extend(f"strategy: {p}" for p in fraction_problems(strategy.wave_fractions))
    # An override may slow the start, never widen it: the first wave after the canary is the
    # class's blast radius (seed 000), which is what the class was approved for.
    if strategy.wave_fractions[0] > policy.wave_fractions[0]:
        reasons.append(
            f"strategy: the first wave ({strategy.wave_fractions[0]}) may not exceed the class's "
            f"({policy.wave_fractions[0]})"
        )
    # Nor may a later wave run ahead of the class's (skipping its 25% ring takes 75% of the
    # fleet at once): more, smaller waves are more careful, fewer, larger ones are not.
    padded = policy.wave_fractions + (1.0,) * len(strategy.wave_fractions)
    ahead = [
        (k, f, padded[k]) for k, f in enumerate(strategy.wave_fractions) if k > 0 and f > padded[k]
    ]
    if ahead:
        k, f, limit = ahead[0]
        reasons.append(
            f"strategy: wave {k + 1} after the canary ({f}) may not run ahead of the class's "
            f"({limit}); a strategy may only make waves smaller"
        )
    return strategy.wave_fractions


def _overrides(
    policy: ClassPolicy, strategy: Strategy, pools: Mapping[str, Pool], used: set[str]
) -> list[str]:
    """A strategy may make a rollout more careful, never less: it may lower a pool's budget
    (the operator's ``max_unavailable``) and lengthen the class's wave soak, and asking for the
    opposite is refused rather than clamped, so the submitter learns that the plan is not the
    one asked for (docs/rollouts.md, "What a strategy may change")."""
    problems = []
    asked = strategy.max_unavailable
    above = sorted(
        p for p in used & set(pools) if asked is not None and asked > pools[p].max_unavailable
    )
    if above:
        budgets = ", ".join(f"{p} {pools[p].max_unavailable}" for p in above[:5])
        more = f" and {len(above) - 5} more" if len(above) > 5 else ""
        problems.append(
            f"strategy: max_unavailable {asked} is above the operator's budget of pool(s) "
            f"{budgets}{more}; a strategy may only lower it"
        )
    if strategy.soak_seconds is not None and strategy.soak_seconds < policy.wave_soak_s:
        problems.append(
            f"strategy: soak_seconds {strategy.soak_seconds} is shorter than the change class's "
            f"wave soak of {policy.wave_soak_s} s; a strategy may only lengthen it"
        )
    return problems


def _canary_refusal(asked: int, units: list[Unit], policy: ClassPolicy, seed: str) -> str | None:
    """Why a strategy's ``canary_nodes`` cannot take effect, or None: one the class's canary
    already exceeds would be silently ignored, and one above the nodes that move asks for a
    canary that is the whole rollout (docs/rollouts.md, "What a strategy may change")."""
    moving = sum(u.size for u in units)
    if asked > moving:
        return (
            f"strategy: canary_nodes {asked} is more than the {moving} node(s) this rollout "
            "moves; a canary must leave nodes for the waves after it"
        )
    own = choose_canary(units, min_per_stratum=policy.canary_min_per_stratum, seed=seed)
    taken = sum(len(s.canary) for s in own.strata)
    if asked < taken:
        return (
            f"strategy: canary_nodes {asked} is fewer than the {taken} node(s) the change "
            f"class's canary takes (canary_min_per_stratum {policy.canary_min_per_stratum} in "
            f"each of {len(own.strata)} strat{'um' if len(own.strata) == 1 else 'a'}); "
            "a strategy may only widen the canary"
        )
    return None


def _unplaceable(
    specs: list[StageSpec],
    caps: Mapping[str, int],
    windows: Mapping[str, Windows],
    pools: Mapping[str, Pool],
) -> list[str]:
    over: set[str] = set()
    too_long: dict[str, int] = {}
    for spec in specs:
        for job in spec.jobs:
            for resource, count in job.demand:
                if resource != FABRIC_SLOTS and count > caps[resource]:
                    over.add(
                        f"{job.label} takes {count} nodes of pool {resource} out at once, "
                        f"over its max_unavailable of {caps[resource]}"
                        + _raise_hint(pools[resource], caps[resource], count)
                    )
                elif resource != FABRIC_SLOTS and job.duration > windows[resource].longest():
                    too_long[resource] = max(too_long.get(resource, 0), job.duration)
    return sorted(over) + [
        f"pool {pool}: an outage of {need} s fits none of its maintenance windows "
        f"(longest {windows[pool].longest()} s)"
        for pool, need in sorted(too_long.items())
    ]


def _raise_hint(pool: Pool, cap: int, need: int) -> str:
    """Which setting to change so a job of ``need`` nodes fits (a switch flash takes a whole
    NVL72 domain, 18 nodes, out at once)."""
    if cap < pool.max_unavailable:
        return f" (the strategy's max_unavailable; the pool allows {pool.max_unavailable})"
    if pool.set_by:
        return f" (set {pool.set_by} to at least {need} to move it)"
    return ""


def _timed(
    request: PlanRequest,
    now: datetime,
    waves: list[tuple[Unit, ...]],
    specs: list[list[StageSpec]],
    caps: Mapping[str, int],
    windows: Mapping[str, Windows],
    strata: tuple[StratumCover, ...],
    excluded: list[Exclusion],
) -> Plan:
    policy = request.policy
    used = {n.pool for wave in waves for u in wave for n in u.nodes}
    wave_soak = max(policy.wave_soak_s, request.strategy.soak_seconds or 0)
    t, bound = 0, 0.0
    planned: list[PlannedWave] = []
    for number, (wave, wave_specs) in enumerate(zip(waves, specs, strict=True)):
        start = t
        gate = policy.canary_soak_s if number == 0 else wave_soak
        stages: list[Stage] = []
        for i, spec in enumerate(wave_specs):
            soak = gate if i == len(wave_specs) - 1 else policy.layer_soak_s
            stage = place_stage(spec, t, caps=caps, windows=windows, soak_s=soak)
            bound = stage_bound(spec, bound, caps=caps, windows=windows) + soak
            stages.append(stage)
            t = stage.end_s
        if not wave_specs:  # nothing applies to these nodes, but the wave is still gated
            t, bound = t + gate, bound + gate
        ids = tuple(sorted(n.id for u in wave for n in u.nodes))
        budget = math.floor(round(policy.failure_budget * len(ids), 6))
        planned.append(PlannedWave(number, ids, tuple(stages), budget, start, t))
    return Plan(
        change_class=request.change_class,
        stack=request.bundle.stack,
        seed=request.seed,
        starts_at=now,
        waves=tuple(planned),
        strata=strata,
        excluded=tuple(excluded),
        max_unavailable=tuple(sorted((p, caps[p]) for p in used)),
        fabric_domains_at_once=caps.get(FABRIC_SLOTS),
        makespan_s=t,
        lower_bound_s=math.floor(bound),
        reflash=_reflash(request.bundle, planned),
    )


def _reflash(bundle: Bundle, waves: Sequence[PlannedWave]) -> tuple[str, ...]:
    """The moving components a flip-back re-flashes (``Plan.reflash``)."""
    moving = {c for w in waves for s in w.stages for c in s.components}
    return tuple(sorted({c.name for c in bundle.components if c.reflash and c.name in moving}))
