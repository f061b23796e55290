"""Fabric domains the OCI way (seed 002): the lifecycle table, pinning target vs current, the
update deferred while occupied, and the conflict while provisioning."""

from __future__ import annotations

import itertools

import pytest

from lockstep_common.errors import PermanentError
from lockstep_common.transitions import InvalidTransition
from lockstep_planner.domain.fabric import (
    ALLOWED,
    FabricConflict,
    FabricDomain,
    Lifecycle,
    RecycleLevel,
    UpdateState,
    abandon_update,
    can_start_update,
    claim,
    finish_update,
    observe,
    observed_at,
    occupy,
    pin,
    release_claim,
    set_recycle,
    start_update,
    transition,
    vacate,
)

pytestmark = pytest.mark.unit


def test_table_covers_every_lifecycle_state() -> None:
    assert set(ALLOWED) == set(Lifecycle)


@pytest.mark.parametrize(("current", "target"), list(itertools.product(Lifecycle, Lifecycle)))
def test_every_pair_is_allowed_or_raises(current: Lifecycle, target: Lifecycle) -> None:
    if target in ALLOWED[current]:
        assert transition(current, target) is target
    else:
        with pytest.raises(InvalidTransition, match=f"from {current.value} to {target.value}"):
            transition(current, target)


def test_provisioning_cannot_be_interrupted_only_finished() -> None:
    assert ALLOWED[Lifecycle.PROVISIONING] == {Lifecycle.AVAILABLE}
    with pytest.raises(PermanentError, match=r"allowed from PROVISIONING: AVAILABLE\)"):
        transition(Lifecycle.PROVISIONING, Lifecycle.OCCUPIED)


def test_pinning_an_occupied_domain_sets_the_target_and_waits_for_it_to_empty() -> None:
    domain = occupy(FabricDomain("fd1", current="b1", target="b1"))
    assert domain.update_state is UpdateState.NO_UPDATE
    pinned = pin(domain, "b2")
    assert (pinned.current, pinned.target) == ("b1", "b2")
    assert pinned.update_state is UpdateState.WILL_UPDATE
    assert "waits until no cluster occupies" in pinned.update_reason
    assert not can_start_update(pinned)
    with pytest.raises(FabricConflict, match="OCCUPIED and WILL_UPDATE"):
        start_update(pinned)
    free = vacate(pinned)
    assert free.lifecycle is Lifecycle.AVAILABLE
    assert can_start_update(free)
    assert free.update_reason == "pinned to b2; waits for a rollout of it"


def test_an_update_runs_with_current_unknown_then_lands_on_the_target() -> None:
    running = start_update(pin(FabricDomain("fd1", current="b1", target="b1"), "b2"))
    assert running.lifecycle is Lifecycle.PROVISIONING
    assert running.current is None  # OCI: null while the fabric is upgrading
    assert running.update_state is UpdateState.WILL_UPDATE
    assert running.update_reason == "updating to b2"
    done = finish_update(running)
    assert (done.current, done.target, done.lifecycle) == ("b2", "b2", Lifecycle.AVAILABLE)
    assert done.update_state is UpdateState.NO_UPDATE
    assert done.update_reason == "at its target bundle"


def test_any_change_while_provisioning_is_a_conflict_naming_the_state() -> None:
    running = start_update(pin(FabricDomain("fd7", current="b1", target=None), "b2"))
    with pytest.raises(FabricConflict, match="fd7 is PROVISIONING: cannot pin b3") as err:
        pin(running, "b3")
    assert err.value.context == {"domain": "fd7", "lifecycle": "PROVISIONING"}
    with pytest.raises(FabricConflict, match="cannot set recycle level"):
        set_recycle(running, RecycleLevel.SKIP_RECYCLE)
    with pytest.raises(InvalidTransition):
        vacate(running)


def test_skip_recycle_holds_the_update_back_with_its_reason() -> None:
    domain = set_recycle(
        pin(FabricDomain("fd1", current="b1", target=None), "b2"), RecycleLevel.SKIP_RECYCLE
    )
    assert domain.update_state is UpdateState.SKIP_RECYCLE_ENABLED
    assert "SKIP_RECYCLE" in domain.update_reason
    assert not can_start_update(domain)
    back = set_recycle(domain, RecycleLevel.FULL_RECYCLE)
    assert back.update_state is UpdateState.WILL_UPDATE


def test_nothing_pinned_means_no_update() -> None:
    domain = FabricDomain("fd1", current="b1", target=None)
    assert (domain.update_state, domain.update_reason) == (
        UpdateState.NO_UPDATE,
        "no target pinned",
    )
    with pytest.raises(FabricConflict, match="cannot start an update"):
        start_update(domain)
    with pytest.raises(InvalidTransition):
        finish_update(domain)


def test_the_scheduler_occupies_and_frees_a_domain_but_never_interrupts_provisioning() -> None:
    domain = FabricDomain("fd1", current="b1", target="b1")
    busy = observe(domain, occupied=True)
    assert busy.lifecycle is Lifecycle.OCCUPIED
    assert observe(busy, occupied=True) == busy
    assert observe(busy, occupied=False).lifecycle is Lifecycle.AVAILABLE
    running = start_update(claim(domain, "b2", "r1"))
    assert observe(running, occupied=True) == running  # a job on a provisioning domain: no change


def test_a_rollout_claims_a_domain_and_it_lands_on_the_target_when_provisioned() -> None:
    held = claim(FabricDomain("fd1", current="b1", target=None), "b2", "r1")
    assert (held.target, held.rollout, held.update_state) == ("b2", "r1", UpdateState.WILL_UPDATE)
    assert held.update_reason == "pinned to b2; rollout r1 updates it when its wave is released"
    assert "waits until no cluster" in occupy(held).update_reason
    done = finish_update(start_update(held))
    assert (done.current, done.target, done.rollout) == ("b2", "b2", None)
    assert done.update_state is UpdateState.NO_UPDATE


def test_a_held_domain_refuses_another_rollout_and_an_operator_pin() -> None:
    held = claim(FabricDomain("fd1", current="b1", target=None), "b2", "r1")
    assert claim(held, "b2", "r1") == held  # the same rollout again: idempotent
    with pytest.raises(FabricConflict, match="fd1 is held by rollout r1: cannot move it to b3"):
        claim(held, "b3", "r2")
    with pytest.raises(FabricConflict, match="held by rollout r1: cannot pin b3"):
        pin(held, "b3")
    free = release_claim(held)
    assert (free.rollout, free.target) == (None, "b2")  # the pin stays
    assert pin(free, "b3").target == "b3"


def test_an_operator_pin_takes_precedence_over_a_rollout_of_another_bundle() -> None:
    pinned = pin(FabricDomain("fd1", current="b1", target=None), "b2")
    with pytest.raises(FabricConflict, match="fd1 is pinned to b2: pin it to b3"):
        claim(pinned, "b3", "r1")
    assert claim(pinned, "b2", "r1").rollout == "r1"
    # A target equal to what runs is no pin to defend.
    assert claim(FabricDomain("fd2", current="b1", target="b1"), "b3", "r1").target == "b3"


def test_an_abandoned_update_leaves_the_bundle_unknown_and_the_pin_pending() -> None:
    running = start_update(claim(FabricDomain("fd1", current="b1", target=None), "b2", "r1"))
    after = abandon_update(running)
    assert (after.lifecycle, after.current, after.target, after.rollout) == (
        Lifecycle.AVAILABLE,
        None,
        "b2",
        None,
    )
    assert after.update_state is UpdateState.WILL_UPDATE
    with pytest.raises(InvalidTransition):
        abandon_update(after)


def test_a_domain_already_on_the_bundle_is_no_update() -> None:
    domain = observed_at(FabricDomain("fd1", current=None, target=None), "b2")
    assert (domain.current, domain.target, domain.update_state) == (
        "b2",
        "b2",
        UpdateState.NO_UPDATE,
    )
    running = start_update(claim(FabricDomain("fd2", current="b1", target=None), "b2", "r1"))
    assert observed_at(running, "b2") == running
