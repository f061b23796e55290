"""What the healthgate keeps, behind a small interface: samples, gated waves and verdicts.

Handlers and the evaluation worker speak to a :class:`GateTx` only. PostgreSQL implements it in
``adapters/pg_store.py`` (samples by COPY into day partitions); ``testing/memory_store.py`` is an
in-memory one with the same semantics, so the handler and worker logic is unit-tested without a
database. Every method runs in the caller's transaction: nothing here commits.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, Protocol

from lockstep_common.outbox import EventSink
from lockstep_gate.decision import GateDecision
from lockstep_healthgate.domain.readings import Columns
from lockstep_healthgate.domain.waves import Wave, WaveState


@dataclass(frozen=True, slots=True)
class SampleRow:
    """One stored reading."""

    observed_at: datetime
    node_id: str
    metric: str
    value: float


class VerdictKind:
    """How a verdict was reached."""

    HARD_RULE = "hard_rule"  # a hard rule at ingest, before the soak ended
    SOAK = "soak"  # the judge at the end of the soak


@dataclass(frozen=True, slots=True)
class VerdictRecord:
    """A persisted verdict: the decision with all its evidence, and what it was judged on."""

    rollout_id: str
    wave: int
    kind: str
    decision: GateDecision
    window_start: datetime
    window_end: datetime
    policy_digest: str
    event_id: uuid.UUID


@dataclass(frozen=True, slots=True)
class Claim:
    """A soaked wave claimed for evaluation, and the fencing token of this claim."""

    rollout_id: str
    wave: int
    token: int
    attempts: int


class GateTx(Protocol):
    """One transaction: everything done through it, and every event emitted to ``events``,
    commits together or not at all."""

    @property
    def events(self) -> EventSink:
        """Where events that must commit with this transaction's changes go."""
        ...

    async def ensure_partitions(self, days: Collection[date]) -> None:
        """Make sure the samples of these UTC days have somewhere to go."""
        ...

    async def add_samples(self, rows: Sequence[SampleRow]) -> int:
        """Append readings; returns how many."""
        ...

    async def samples(
        self,
        node_ids: Collection[str],
        metrics: Collection[str] | None,
        since: datetime,
        until: datetime,
        *,
        skip: tuple[datetime, datetime] | None = None,
    ) -> Columns:
        """Readings of these nodes (and metrics; None: all) with ``since <= time <= until``, as
        compact columns (a whole wave's baseline and soak can be millions of readings). Readings
        with ``skip[0] <= time < skip[1]`` are left out, but their nodes and metrics are still
        in the columns' names: the judge's table has every node and metric seen in its window
        (``waves.sample_table``) and none of the rows of the update itself."""
        ...

    async def node_medians(
        self, metrics: Collection[str], since: datetime, until: datetime
    ) -> dict[str, dict[str, float]]:
        """node -> metric -> median over ``since <= time < until``, for nodes in no open
        wave (a node being updated is expected to look different: that is the gate's to judge)."""
        ...

    async def take_straggler_turn(self) -> None:
        """Hold the straggler evaluation's lock until this transaction ends: two healthgate
        processes evaluate one after the other, so a change is announced once."""
        ...

    async def flagged(self, profile: str) -> frozenset[str] | None:
        """The stragglers last reported for ``profile`` (None: never reported)."""
        ...

    async def save_flagged(
        self, profile: str, node_ids: Collection[str], finding: dict[str, Any], at: datetime
    ) -> None:
        """Record the stragglers reported for ``profile`` (replacing the last ones)."""
        ...

    async def add_wave(self, wave: Wave) -> bool:
        """Record a planned wave and its members; False when it was already recorded."""
        ...

    async def wave(self, rollout_id: str, wave: int) -> Wave | None:
        """A wave, locked until the transaction ends."""
        ...

    async def set_state(
        self,
        rollout_id: str,
        wave: int,
        state: WaveState,
        *,
        completed_at: datetime | None = None,
    ) -> None:
        """Move a wave (the caller checked the move with ``waves.transition``)."""
        ...

    async def open_waves(
        self, node_ids: Collection[str], rollout_id: str | None = None
    ) -> list[Wave]:
        """Updating or soaking waves with any of these nodes as canary or control (of one
        rollout if given), in (rollout, wave) order."""
        ...

    async def soaking_waves(self) -> list[Wave]:
        """Every soaking wave, in (rollout, wave) order (the heartbeat watch's rounds)."""
        ...

    async def open_waves_of(self, rollout_id: str) -> list[Wave]:
        """A rollout's updating or soaking waves, in wave order."""
        ...

    async def save_verdict(self, record: VerdictRecord) -> bool:
        """Persist a verdict unless the wave has one; True when it was saved."""
        ...

    async def verdicts(self, rollout_id: str, wave: int | None = None) -> list[VerdictRecord]:
        """A rollout's verdicts (one wave's if given), in wave order."""
        ...

    async def claim_due(self, now: datetime, grace_s: float, lease_s: float) -> Claim | None:
        """Claim the soaking wave whose soak ended longest ago (at least ``grace_s`` before
        ``now``, so late samples are in), unless another claim's lease still runs: next fencing
        token, one more attempt, a lease of ``lease_s``."""
        ...

    async def still_holds(self, claim: Claim) -> bool:
        """Lock the wave and check this claim was not taken over (the fence)."""
        ...


class GateStore(Protocol):
    """Opens units of work on the healthgate's state."""

    def transaction(self) -> AbstractAsyncContextManager[GateTx]:
        """A transaction that commits when the block ends normally and vanishes if it raises."""
        ...
