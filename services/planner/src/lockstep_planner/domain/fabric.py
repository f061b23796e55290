"""Fabric domains the OCI way (seed 002, "GPU Memory Fabric Firmware Pinning").

A domain has a ``current`` and a ``target`` bundle. Pinning sets the target; the update itself
waits until the domain is unoccupied ("the target firmware bundle ... the memory fabric will
upgrade to, when [its] lifecycleState is next unoccupied"), and ``current`` is None while the
update runs. A change while the domain is ``PROVISIONING`` is refused with a conflict (OCI: "A
409 Conflict indicates that the GPU memory fabric is currently in the PROVISIONING state";
updates are allowed only in AVAILABLE or OCCUPIED). ``update_state`` and its reason are derived
from the rest, as OCI's ``firmwareUpdateState`` and ``firmwareUpdateReason`` are, so they cannot
disagree with it.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass

from lockstep_common.errors import PermanentError
from lockstep_common.transitions import InvalidTransition, Transitions


class Lifecycle(enum.StrEnum):
    """OCI ``lifecycleState`` of a GPU memory fabric."""

    AVAILABLE = "AVAILABLE"
    """No cluster on it: an update may start."""
    OCCUPIED = "OCCUPIED"
    """A cluster runs on it: a pin is recorded, the update waits."""
    PROVISIONING = "PROVISIONING"
    """Being (re)provisioned: cannot be interrupted or changed."""


class UpdateState(enum.StrEnum):
    """OCI ``firmwareUpdateState``."""

    WILL_UPDATE = "WILL_UPDATE"
    NO_UPDATE = "NO_UPDATE"
    SKIP_RECYCLE_ENABLED = "SKIP_RECYCLE_ENABLED"


class RecycleLevel(enum.StrEnum):
    """OCI ``fabricRecycleLevel``: whether hosts are recycled (and so reflashed)."""

    FULL_RECYCLE = "FULL_RECYCLE"
    SKIP_RECYCLE = "SKIP_RECYCLE"


ALLOWED: dict[Lifecycle, frozenset[Lifecycle]] = {
    Lifecycle.AVAILABLE: frozenset({Lifecycle.OCCUPIED, Lifecycle.PROVISIONING}),
    # The last cluster terminated: back to AVAILABLE, or straight to PROVISIONING when the
    # fabric needs it (seed 002, "Single GPU memory cluster", cases 1 and 2).
    Lifecycle.OCCUPIED: frozenset({Lifecycle.AVAILABLE, Lifecycle.PROVISIONING}),
    # "An ongoing firmware update can't be interrupted": the only way out is finishing it.
    Lifecycle.PROVISIONING: frozenset({Lifecycle.AVAILABLE}),
}


transition = Transitions("fabric domain", ALLOWED)
"""``transition(current, target)``: ``target`` if the table allows the move, else
:class:`InvalidTransition`."""


class FabricConflict(PermanentError):
    """The domain cannot take this change now (OCI's 409); the message says why."""


@dataclass(frozen=True, slots=True)
class FabricDomain:
    """One NVLink domain's firmware state."""

    id: str
    current: str | None
    """Installed bundle; None while an update runs."""
    target: str | None
    lifecycle: Lifecycle = Lifecycle.AVAILABLE
    recycle: RecycleLevel = RecycleLevel.FULL_RECYCLE
    rollout: str | None = None
    """The rollout carrying the update out; None: pinned by an operator and waiting for a
    rollout of its target (Lockstep moves firmware only through gated rollouts, never on a pin
    alone, where OCI starts on its own 15 to 30 minutes after the pin)."""

    @property
    def update_state(self) -> UpdateState:
        if self.recycle is RecycleLevel.SKIP_RECYCLE:
            return UpdateState.SKIP_RECYCLE_ENABLED
        if self.lifecycle is Lifecycle.PROVISIONING or (
            self.target is not None and self.target != self.current
        ):
            return UpdateState.WILL_UPDATE
        return UpdateState.NO_UPDATE

    @property
    def update_reason(self) -> str:
        state = self.update_state
        if state is UpdateState.SKIP_RECYCLE_ENABLED:
            return "recycle level is SKIP_RECYCLE: hosts are not reflashed"
        if state is UpdateState.NO_UPDATE:
            return "at its target bundle" if self.target is not None else "no target pinned"
        if self.lifecycle is Lifecycle.PROVISIONING:
            return f"updating to {self.target}"
        if self.lifecycle is Lifecycle.OCCUPIED:
            return f"pinned to {self.target}; waits until no cluster occupies the domain"
        if self.rollout is None:
            return f"pinned to {self.target}; waits for a rollout of it"
        return (
            f"pinned to {self.target}; rollout {self.rollout} updates it when its wave is released"
        )


def _refuse_while_provisioning(domain: FabricDomain, what: str) -> None:
    if domain.lifecycle is Lifecycle.PROVISIONING:
        raise FabricConflict(
            f"fabric domain {domain.id} is PROVISIONING: cannot {what} until it is AVAILABLE",
            domain=domain.id,
            lifecycle=domain.lifecycle.value,
        )


def pin(domain: FabricDomain, bundle: str) -> FabricDomain:
    """Set the target bundle; the update itself waits for an unoccupied domain.

    Raises:
        FabricConflict: the domain is PROVISIONING.
    """
    _refuse_while_provisioning(domain, f"pin {bundle}")
    _refuse_while_held(domain, f"pin {bundle}")
    return dataclasses.replace(domain, target=bundle)


def _refuse_while_held(domain: FabricDomain, what: str, rollout: str | None = None) -> None:
    if domain.rollout is not None and domain.rollout != rollout:
        raise FabricConflict(
            f"fabric domain {domain.id} is held by rollout {domain.rollout}: cannot {what} "
            "until it completes or is aborted",
            domain=domain.id,
            rollout=domain.rollout,
        )


def claim(domain: FabricDomain, bundle: str, rollout: str) -> FabricDomain:
    """A rollout of ``bundle`` takes the domain: its target becomes ``bundle`` and the rollout
    carries the update out once the domain is unoccupied. An operator's pin to another bundle
    takes precedence (seed 002: "Your selection takes precedence over any ... process for
    determining the target firmware bundle"), so it refuses the claim rather than being
    overwritten.

    Raises:
        FabricConflict: the domain is PROVISIONING, held by another rollout, or pinned to
            another bundle.
    """
    _refuse_while_provisioning(domain, f"move it to {bundle}")
    _refuse_while_held(domain, f"move it to {bundle}", rollout)
    if domain.target is not None and domain.target not in (bundle, domain.current):
        raise FabricConflict(
            f"fabric domain {domain.id} is pinned to {domain.target}: pin it to {bundle} "
            "(lockstep fabric pin) or leave it out of the scope",
            domain=domain.id,
        )
    return dataclasses.replace(domain, target=bundle, rollout=rollout)


def observed_at(domain: FabricDomain, bundle: str) -> FabricDomain:
    """Every node of the domain already runs ``bundle``: that is its current bundle (and its
    target, when none was pinned), so with nothing else pinned it is NO_UPDATE."""
    if domain.lifecycle is Lifecycle.PROVISIONING:
        return domain
    return dataclasses.replace(domain, current=bundle, target=domain.target or bundle)


def release_claim(domain: FabricDomain) -> FabricDomain:
    """The rollout holding a domain that never started provisioning ended (aborted, halted):
    the target stays pinned, and a later rollout of it, or an operator's pin, may take it."""
    return dataclasses.replace(domain, rollout=None)


def set_recycle(domain: FabricDomain, level: RecycleLevel) -> FabricDomain:
    """Change the recycle level (SKIP_RECYCLE holds every update back).

    Raises:
        FabricConflict: the domain is PROVISIONING.
    """
    _refuse_while_provisioning(domain, f"set recycle level {level}")
    return dataclasses.replace(domain, recycle=level)


def occupy(domain: FabricDomain) -> FabricDomain:
    """A cluster started on the domain."""
    return dataclasses.replace(domain, lifecycle=transition(domain.lifecycle, Lifecycle.OCCUPIED))


def vacate(domain: FabricDomain) -> FabricDomain:
    """The last cluster ended.

    Raises:
        InvalidTransition: the domain was not occupied (PROVISIONING ends by finishing).
    """
    if domain.lifecycle is not Lifecycle.OCCUPIED:
        raise InvalidTransition(
            transition.machine, domain.lifecycle, Lifecycle.AVAILABLE, ALLOWED[domain.lifecycle]
        )
    return dataclasses.replace(domain, lifecycle=transition(domain.lifecycle, Lifecycle.AVAILABLE))


def observe(domain: FabricDomain, *, occupied: bool) -> FabricDomain:
    """What the scheduler says: a job on any node of the domain occupies it.

    A PROVISIONING domain stays PROVISIONING whatever runs on it (the updater drains its nodes
    and waits for their jobs to end; OCI's provisioning "can't be interrupted")."""
    if domain.lifecycle is Lifecycle.PROVISIONING:
        return domain
    if occupied and domain.lifecycle is Lifecycle.AVAILABLE:
        return occupy(domain)
    if not occupied and domain.lifecycle is Lifecycle.OCCUPIED:
        return vacate(domain)
    return domain


def can_start_update(domain: FabricDomain) -> bool:
    """An update is pending and nothing occupies the domain."""
    return domain.lifecycle is Lifecycle.AVAILABLE and (
        domain.update_state is UpdateState.WILL_UPDATE
    )


def start_update(domain: FabricDomain) -> FabricDomain:
    """Begin provisioning the target; ``current`` is unknown until it finishes.

    Raises:
        FabricConflict: no update is pending, or the domain is not AVAILABLE.
    """
    if not can_start_update(domain):
        raise FabricConflict(
            f"fabric domain {domain.id} cannot start an update: it is {domain.lifecycle.value} "
            f"and {domain.update_state.value} ({domain.update_reason})",
            domain=domain.id,
            lifecycle=domain.lifecycle.value,
        )
    return dataclasses.replace(
        domain, current=None, lifecycle=transition(domain.lifecycle, Lifecycle.PROVISIONING)
    )


def finish_update(domain: FabricDomain) -> FabricDomain:
    """Provisioning ended: the domain runs its target and is available again.

    Raises:
        InvalidTransition: the domain was not provisioning.
    """
    if domain.lifecycle is not Lifecycle.PROVISIONING:
        raise InvalidTransition(
            transition.machine, domain.lifecycle, Lifecycle.AVAILABLE, ALLOWED[domain.lifecycle]
        )
    lifecycle = transition(domain.lifecycle, Lifecycle.AVAILABLE)
    return dataclasses.replace(domain, current=domain.target, lifecycle=lifecycle, rollout=None)


def abandon_update(domain: FabricDomain) -> FabricDomain:
    """The rollout provisioning the domain halted or was aborted: its in-flight device steps
    finish, but which bundle the domain ends on is unknown (``current`` stays None) until a
    rollout moves it again; the target stays pinned, so the domain still shows WILL_UPDATE.

    Raises:
        InvalidTransition: the domain was not provisioning.
    """
    if domain.lifecycle is not Lifecycle.PROVISIONING:
        raise InvalidTransition(
            transition.machine, domain.lifecycle, Lifecycle.AVAILABLE, ALLOWED[domain.lifecycle]
        )
    lifecycle = transition(domain.lifecycle, Lifecycle.AVAILABLE)
    return dataclasses.replace(domain, lifecycle=lifecycle, rollout=None)
