"""The updater store on PostgreSQL (migrations/0001_updater.sql).

``PostgresStore`` opens a transaction on a pooled connection whose events go to the outbox
(``outbox.emitting``); ``joined`` runs a handler in the consumer runtime's own transaction.
States are spelled only by ``domain.steps.NodeStep``, and every change is checked by
``domain.steps.transition`` on the state read under the row's lock. Leases compare with
PostgreSQL's clock, the one every claimer shares.
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from lockstep_common.db import Conn
from lockstep_common.outbox import EventSink
from lockstep_common.stores import JoinedAt, PooledStore
from lockstep_updater.adapters.remedy_rows import RemedyRows, release_quarantined, release_remedy
from lockstep_updater.adapters.rollout_rows import RolloutRows
from lockstep_updater.adapters.step_rows import StepRows
from lockstep_updater.adapters.wave_rows import WaveRows, step_history

__all__ = [
    "PostgresStore",
    "PostgresTx",
    "joined",
    "release_quarantined",
    "release_remedy",
    "step_history",
]


class PostgresStore(PooledStore["PostgresTx"]):
    """An ``UpdaterStore`` on the service's pool (its connections' search_path is the schema)."""

    def __init__(self, pool: asyncpg.Pool, source: str) -> None:
        super().__init__(pool, source, PostgresTx)


@dataclass(frozen=True, slots=True)
class PostgresTx(RolloutRows, RemedyRows, StepRows, WaveRows):
    """An ``UpdaterTx`` on a connection inside an open transaction: one part per module (a
    rollout's rows, remedies, steps, waves)."""

    conn: Conn
    events: EventSink


joined = JoinedAt(PostgresTx)
"""``joined(handler)``: a ``Handler`` ``(tx, env, *, now)`` run in the consumer runtime's
transaction (its inbox claim and outbox), ``now`` read from the system clock."""
