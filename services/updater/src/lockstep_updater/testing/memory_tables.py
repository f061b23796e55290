"""The in-memory updater store's tables: the rows of ``node_work`` (:class:`Item`), of ``waves``
and the rest, as the PostgreSQL store keeps them (``adapters/repository.py``).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from lockstep_common.events.v1 import AttestedComponent
from lockstep_updater.domain.steps import (
    INITIAL,
    NodeStep,
)
from lockstep_updater.store import (
    UPDATE,
    StepRecord,
)

START = datetime(2026, 1, 1, tzinfo=UTC)
HELD = datetime.max.replace(tzinfo=UTC)
"""A held remedy's lease: PostgreSQL's 'infinity' (never claimable until approved)."""
FAILURES = frozenset({NodeStep.FAILED, NodeStep.QUARANTINED})


@dataclass(slots=True)
class Item:
    """One row of ``updater.node_work``."""

    id: int
    rollout_id: str
    wave: int
    node_id: str
    components: tuple[str, ...]
    correlation_id: str | None
    state: NodeStep = INITIAL
    attempts: int = 0
    lease_token: int = 0
    lease_until: datetime | None = None
    claimed_at: datetime | None = None
    released_at: datetime | None = None
    reason: str = ""
    pool: str = ""
    progress: dict[str, Any] = field(default_factory=dict)
    updated_at: datetime = START
    kind: str = UPDATE
    parked: bool = False  # waiting for a place in its pool's budget (``UpdaterTx.advance``)

    @property
    def ready_at(self) -> datetime:
        """Since when the item may be claimed: claims take the longest ready first."""
        return self.lease_until or self.updated_at


def claim_order(item: Item) -> tuple[datetime, int]:
    """Longest ready first, as the Postgres store's claim index orders them."""
    return item.ready_at, item.id


@dataclass(slots=True)
class Wave:
    node_ids: tuple[str, ...]
    max_unavailable: int
    failure_budget: int
    correlation_id: str | None
    completed: bool = False
    completed_at: datetime | None = None
    completed_event: uuid.UUID | None = None
    redriven_at: datetime | None = None
    redrives: int = 0
    reflash: frozenset[str] = frozenset()


@dataclass(slots=True)
class Tables:
    plans: dict[str, tuple[str, frozenset[str]]] = field(default_factory=dict)
    plan_waves: dict[str, dict[str, int]] = field(default_factory=dict)
    bundles: dict[str, tuple[str | None, tuple[AttestedComponent, ...]]] = field(
        default_factory=dict
    )
    halted: dict[str, str] = field(default_factory=dict)
    waves: dict[tuple[str, int], Wave] = field(default_factory=dict)
    republished: list[tuple[uuid.UUID, str]] = field(default_factory=list)
    """Events published again (``outbox.republish``), with their re-drive tag."""
    items: dict[int, Item] = field(default_factory=dict)
    steps: list[tuple[str, StepRecord]] = field(default_factory=list)
    windows: dict[tuple[str, str], tuple[str, tuple[str, ...] | None, datetime]] = field(
        default_factory=dict
    )
