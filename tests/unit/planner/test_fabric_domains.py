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
    can_start_update,
    finish_update,
    occupy,
    pin,
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
    assert "starts now" in free.update_reason


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
