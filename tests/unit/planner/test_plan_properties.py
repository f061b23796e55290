"""Every plan invariant, on generated fleets (issue 10, "Done means": property tests that
generate fleets and check every plan invariant)."""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from dataclasses import replace
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lockstep_planner.domain.fleet import LAYER_ORDER, ComponentKind, PowerSide
from lockstep_planner.domain.plan import Plan, PlanRequest, plan
from lockstep_planner.domain.plan_hash import plan_hash
from lockstep_planner.domain.refusal import PlanRefused
from lockstep_planner.domain.stages import FABRIC_SLOTS

from .fleets import NOW, cases

pytestmark = pytest.mark.unit
PROPERTY = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def planned(request: PlanRequest) -> Plan | None:
    """The plan, or None when the only refusals are ones the generator can legitimately hit."""
    try:
        return plan(request, now=NOW)
    except PlanRefused as exc:
        legit = ("no node in scope can move", "over its max_unavailable")
        assert all(any(w in r for w in legit) for r in exc.reasons), exc.reasons
        return None


def busiest(intervals: list[tuple[int, int]]) -> int:
    """The most intervals ``[start, end)`` open at once."""
    events = sorted(
        [(s, 1) for s, e in intervals if e > s] + [(e, -1) for s, e in intervals if e > s]
    )
    most = now = 0
    for _, step in events:  # at equal times -1 sorts first: back-to-back is not overlap
        now += step
        most = max(most, now)
    return most


@given(cases())
@PROPERTY
def test_every_node_in_scope_is_in_exactly_one_wave_or_excluded_with_a_reason(
    request: PlanRequest,
) -> None:
    result = planned(request)
    if result is None:
        return
    in_waves = Counter(n for w in result.waves for n in w.node_ids)
    assert set(in_waves.values()) == {1}
    excluded = {e.node_id for e in result.excluded}
    assert not excluded & set(in_waves)
    assert excluded | set(in_waves) == {n.id for n in request.fleet}
    assert all(e.reason for e in result.excluded)
    assert [w.number for w in result.waves] == list(range(len(result.waves)))


@given(cases())
@PROPERTY
def test_canary_covers_every_stratum_and_controls_are_untouched_peers(
    request: PlanRequest,
) -> None:
    result = planned(request)
    if result is None:
        return
    by_id = {n.id: n for n in request.fleet}
    moving = {n for w in result.waves for n in w.node_ids}
    canary = set(result.waves[0].node_ids)
    sizes = Counter(by_id[n].stratum for n in moving)
    assert {c.stratum for c in result.strata} == set(sizes)
    need = request.policy.canary_min_per_stratum
    for cover in result.strata:
        assert cover.size == sizes[cover.stratum]
        assert len(cover.canary) >= min(need, cover.size)
        assert set(cover.canary) <= canary
        assert all(by_id[n].stratum == cover.stratum for n in cover.canary + cover.controls)
        assert not set(cover.controls) & canary
        assert len(cover.controls) == min(len(cover.canary), cover.size - len(cover.canary))
    # The canary is exactly the strata's canary nodes: nothing sneaks in uncounted.
    assert canary == {n for c in result.strata for n in c.canary}


@given(cases())
@PROPERTY
def test_no_pool_is_ever_over_its_budget_and_fabric_domains_respect_the_class_cap(
    request: PlanRequest,
) -> None:
    result = planned(request)
    if result is None:
        return
    pool_of = {n.id: n.pool for n in request.fleet}
    out: dict[str, list[tuple[int, int]]] = defaultdict(list)
    domains_out: list[tuple[int, int]] = []
    for wave in result.waves:
        for stage in wave.stages:
            for batch in stage.batches:
                for n in batch.node_ids:
                    out[pool_of[n]].append((batch.start_s, batch.end_s))
                if stage.kind is ComponentKind.FABRIC_SWITCH:
                    domains = _domains(request, batch.node_ids)
                    domains_out.extend([(batch.start_s, batch.end_s)] * len(domains))
    caps = dict(result.max_unavailable)
    for pool, intervals in out.items():
        assert busiest(intervals) <= caps[pool] <= request.pools[pool].max_unavailable
    if result.fabric_domains_at_once is not None:
        assert result.fabric_domains_at_once == request.policy.max_fabric_domains_at_once
        assert busiest(domains_out) <= result.fabric_domains_at_once
    assert FABRIC_SLOTS not in caps


def _domains(request: PlanRequest, ids: tuple[str, ...]) -> set[str | None]:
    by_id = {n.id: n for n in request.fleet}
    return {by_id[i].fabric_domain for i in ids}


@given(cases())
@PROPERTY
def test_outages_fall_wholly_inside_a_maintenance_window_of_their_pool(
    request: PlanRequest,
) -> None:
    result = planned(request)
    if result is None:
        return
    pool_of = {n.id: n.pool for n in request.fleet}
    for wave in result.waves:
        for stage in wave.stages:
            for batch in stage.batches:
                if batch.end_s == batch.start_s:
                    continue  # nothing is out of service
                start = NOW + timedelta(seconds=batch.start_s)
                end = NOW + timedelta(seconds=batch.end_s)
                for pool in {pool_of[n] for n in batch.node_ids}:
                    windows = request.pools[pool].windows
                    assert windows is None or any(
                        w.start <= start and end <= w.end for w in windows
                    ), (pool, start, end)


@given(cases())
@PROPERTY
def test_layers_run_reversible_to_one_way_one_gated_stage_after_another(
    request: PlanRequest,
) -> None:
    result = planned(request)
    if result is None:
        return
    kinds_in_bundle = {c.kind for c in request.bundle.components}
    previous_end = 0
    for wave in result.waves:
        assert wave.start_s == previous_end
        order = [(LAYER_ORDER.index(s.kind), s.power_side or "") for s in wave.stages]
        assert order == sorted(order)
        assert len(set(order)) == len(order)
        assert {s.kind for s in wave.stages} <= kinds_in_bundle
        at = wave.start_s
        for stage in wave.stages:
            assert stage.start_s == at
            for batch in stage.batches:
                assert stage.start_s <= batch.start_s <= batch.end_s <= stage.work_end_s
            at = stage.end_s
        assert wave.end_s >= at
        previous_end = wave.end_s
    assert result.makespan_s == previous_end
    assert result.lower_bound_s <= result.makespan_s


@given(cases())
@PROPERTY
def test_fabric_domains_move_whole_and_power_moves_one_side_at_a_time(
    request: PlanRequest,
) -> None:
    result = planned(request)
    if result is None:
        return
    by_id = {n.id: n for n in request.fleet}
    moving = {n for w in result.waves for n in w.node_ids}
    members: dict[str, set[str]] = defaultdict(set)
    for n in request.fleet:
        if n.fabric_domain is not None:
            members[n.fabric_domain].add(n.id)
    if request.bundle.moves_fabric:
        wave_of = {n: w.number for w in result.waves for n in w.node_ids}
        for ids in members.values():
            # Whole domain moves, in one wave, or none of it does.
            assert ids <= moving or not ids & moving
            assert len({wave_of[i] for i in ids & moving}) <= 1
    for wave in result.waves:
        for stage in wave.stages:
            if stage.kind is ComponentKind.FABRIC_SWITCH:
                for batch in stage.batches:
                    for domain in _domains(request, batch.node_ids):
                        assert {i for i in members[str(domain)] if i in moving} <= set(
                            batch.node_ids
                        )
            if stage.kind is ComponentKind.PSU_BBU:
                assert stage.power_side in (PowerSide.A, PowerSide.B)
                assert {by_id[n].power_side for n in stage.node_ids} == {stage.power_side}
            else:
                assert stage.power_side is None


@given(cases())
@PROPERTY
def test_same_request_and_seed_give_the_same_plan_whatever_the_fleet_order(
    request: PlanRequest,
) -> None:
    result = planned(request)
    if result is None:
        return
    again = plan(request, now=NOW)
    shuffled = list(request.fleet)
    random.Random(4).shuffle(shuffled)
    reordered = plan(replace(request, fleet=tuple(shuffled)), now=NOW)
    assert again == result
    assert plan_hash(reordered) == plan_hash(result)
    assert reordered.waves == result.waves


@given(cases(), st.randoms(use_true_random=False))
@PROPERTY
def test_no_wave_includes_a_node_of_an_occupied_domain_when_switch_firmware_moves(
    request: PlanRequest, rng: random.Random
) -> None:
    domains = sorted({n.fabric_domain for n in request.fleet if n.fabric_domain})
    occupied = {d: f"fabric domain {d} is OCCUPIED" for d in domains if rng.random() < 0.3}
    result = planned(replace(request, deferred_domains=occupied))
    if result is None:
        return
    by_id = {n.id: n for n in request.fleet}
    moving = [by_id[i] for w in result.waves for i in w.node_ids]
    if request.bundle.moves_fabric:
        assert not any(n.fabric_domain in occupied for n in moving)
        deferred = {e.node_id for e in result.excluded if e.reason.startswith("deferred: ")}
        assert all(by_id[i].fabric_domain in occupied for i in deferred)
    else:
        assert not any(e.reason.startswith("deferred: ") for e in result.excluded)
