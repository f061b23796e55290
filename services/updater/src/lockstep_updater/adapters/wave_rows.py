"""A wave's end in the updater's store: ``wave.completed`` once every item ended, its
re-drive while the planner has not acted on it, and the step history of a node.
"""

from __future__ import annotations

import uuid

from lockstep_common import outbox
from lockstep_common.db import Conn
from lockstep_common.outbox import EventSink
from lockstep_updater.adapters.work_sql import sql_list
from lockstep_updater.domain.steps import (
    TERMINAL,
    NodeStep,
)
from lockstep_updater.store import (
    Completion,
    StepRecord,
    WaveResult,
)


class WaveRows:
    """Wave completion, its re-drives and node history, on ``conn``."""

    __slots__ = ()
    conn: Conn
    events: EventSink

    async def complete_wave(self, rollout_id: str, wave: int) -> WaveResult | None:
        found = await self.conn.fetchrow(
            "SELECT correlation_id, completed_at FROM waves WHERE rollout_id = $1 AND wave = $2"
            " FOR UPDATE",
            rollout_id,
            wave,
        )
        if found is None or found["completed_at"] is not None:
            return None
        # Every item's last commit asks this: one EXISTS while any is open, not the whole wave's
        # rows each time (a 9,375-node wave read 88 million rows that way, lockstep bench rollout).
        if await self.conn.fetchval(
            f"SELECT EXISTS (SELECT 1 FROM node_work WHERE rollout_id = $1 AND wave = $2"
            f" AND kind = 'update' AND state NOT IN ({sql_list(TERMINAL)}))",
            rollout_id,
            wave,
        ):
            return None
        rows = await self.conn.fetch(
            "SELECT node_id, state FROM node_work WHERE rollout_id = $1 AND wave = $2"
            " AND kind = 'update' ORDER BY id",
            rollout_id,
            wave,
        )
        if any(NodeStep(r["state"]) not in TERMINAL for r in rows):
            return None
        await self.conn.execute(
            "UPDATE waves SET completed_at = now() WHERE rollout_id = $1 AND wave = $2",
            rollout_id,
            wave,
        )
        done = NodeStep.DONE.value
        return WaveResult(
            rollout_id,
            wave,
            tuple(r["node_id"] for r in rows if r["state"] == done),
            tuple(r["node_id"] for r in rows if r["state"] != done),
            found["correlation_id"],
        )

    async def history(self, node_id: str, limit: int) -> list[StepRecord]:
        return await step_history(self.conn, node_id, limit)

    async def completion_sent(self, rollout_id: str, wave: int, event_id: uuid.UUID) -> None:
        await self.conn.execute(
            "UPDATE waves SET completed_event = $3 WHERE rollout_id = $1 AND wave = $2",
            rollout_id,
            wave,
            event_id,
        )

    async def unanswered_completions(
        self, after_s: float, max_redrives: int, limit: int
    ) -> list[Completion]:
        rows = await self.conn.fetch(
            "SELECT rollout_id, wave, completed_event, redrives FROM waves w"
            " WHERE completed_event IS NOT NULL AND redrives < $2"
            " AND GREATEST(completed_at, redriven_at)"
            " <= now() - make_interval(secs => $1::float8 * 2 ^ redrives)"
            " AND NOT EXISTS (SELECT 1 FROM waves l WHERE l.rollout_id = w.rollout_id"
            " AND l.wave > w.wave)"
            " AND NOT EXISTS (SELECT 1 FROM halts h WHERE h.rollout_id = w.rollout_id)"
            " ORDER BY completed_at LIMIT $3 FOR UPDATE SKIP LOCKED",
            after_s,
            max_redrives,
            limit,
        )
        return [
            Completion(r["rollout_id"], r["wave"], r["completed_event"], r["redrives"])
            for r in rows
        ]

    async def redrive_completion(self, completion: Completion) -> bool:
        await self.conn.execute(
            "UPDATE waves SET redriven_at = now(), redrives = redrives + 1"
            " WHERE rollout_id = $1 AND wave = $2",
            completion.rollout_id,
            completion.wave,
        )
        return await outbox.republish(
            self.conn, completion.event_id, f"redrive-{completion.redrives + 1}"
        )


async def step_history(conn: Conn, node_id: str, limit: int) -> list[StepRecord]:
    """The node's last ``limit`` steps, oldest first (``lockstep node history``)."""
    rows = await conn.fetch(
        "SELECT * FROM (SELECT id, rollout_id, wave, step, attempt, token, started_at,"
        " ended_at, outcome, reason FROM node_steps WHERE node_id = $1"
        " ORDER BY id DESC LIMIT $2) s ORDER BY id",
        node_id,
        limit,
    )
    return [
        StepRecord(
            r["rollout_id"],
            r["wave"],
            r["step"],
            r["attempt"],
            r["token"],
            r["started_at"],
            r["ended_at"],
            r["outcome"],
            r["reason"],
        )
        for r in rows
    ]
