"""GSP remedies and quarantine releases in the updater's store: a remedy recorded once per
node, held for approval or withdrawn, the budget facts its guard reads, and an operator's
release of a quarantined node.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from lockstep_common.db import Conn
from lockstep_common.outbox import EventSink
from lockstep_updater.adapters.work_sql import (
    OUT_STATES,
    TERMINAL_NAMES,
    sql_list,
)
from lockstep_updater.domain.guard import RemedyFacts
from lockstep_updater.domain.steps import (
    TERMINAL,
    NodeStep,
    transition,
)
from lockstep_updater.store import (
    RELEASE,
    Claim,
    NotQuarantined,
)


class RemedyRows:
    """A node's remedy items and their guard's facts, on ``conn``."""

    __slots__ = ()
    conn: Conn
    events: EventSink

    async def record_remedy(
        self,
        node_id: str,
        remedy_id: str,
        *,
        held: bool,
        progress: dict[str, Any],
        correlation_id: str | None,
    ) -> bool:
        # One decision per node at a time: two updaters reading the same drift twice (two
        # events) cannot both find "none open" and both add one.
        await self.conn.execute(
            "SELECT pg_advisory_xact_lock(hashtext('updater-remedy:' || $1))", node_id
        )
        if await self.conn.fetchval(
            "SELECT EXISTS (SELECT 1 FROM node_work WHERE node_id = $1 AND kind = 'remedy'"
            f" AND state NOT IN ({sql_list(frozenset({NodeStep.DONE, NodeStep.CANCELLED}))}))",
            node_id,
        ):
            return False
        added = await self.conn.fetchval(
            "INSERT INTO node_work (rollout_id, wave, node_id, components, correlation_id, kind,"
            " progress, lease_until) VALUES ($1, 0, $2, $3, $4, 'remedy', $5,"
            " CASE WHEN $6 THEN 'infinity'::timestamptz END)"
            " ON CONFLICT (rollout_id, node_id, kind) DO NOTHING RETURNING true",
            remedy_id,
            node_id,
            ["driver"],
            correlation_id,
            json.dumps(progress),
            held,
        )
        return bool(added)

    async def approve_remedy(self, node_id: str) -> bool:
        return await release_remedy(self.conn, node_id)

    async def withdraw_remedy(
        self, node_id: str, reason: str, *, unless_pin: str | None = None
    ) -> bool:
        state = transition(NodeStep.PENDING, NodeStep.CANCELLED).value
        row = await self.conn.fetchval(
            "UPDATE node_work SET state = $2, reason = $3, lease_until = NULL, updated_at = now()"
            " WHERE node_id = $1 AND kind = 'remedy' AND state = 'pending'"
            " AND lease_until = 'infinity'"
            " AND ($4::text IS NULL OR progress->>'pin' IS DISTINCT FROM $4) RETURNING id",
            node_id,
            state,
            reason,
            unless_pin,
        )
        return row is not None

    async def remedy_facts(self, claim: Claim, pool: str) -> RemedyFacts:
        await self.conn.execute(
            "SELECT pg_advisory_xact_lock(hashtext('updater-pool:' || $1))", pool
        )
        await self.conn.execute("UPDATE node_work SET pool = $2 WHERE id = $1", claim.id, pool)
        in_rollout = await self.conn.fetchval(
            f"SELECT rollout_id FROM node_work WHERE node_id = $1 AND kind <> 'remedy'"
            f" AND state NOT IN ({sql_list(TERMINAL)}) ORDER BY id LIMIT 1",
            claim.node_id,
        )
        out = await self.conn.fetchrow(
            f"SELECT count(*) AS others, count(*) FILTER (WHERE kind = 'remedy') AS remedies"
            f" FROM node_work WHERE pool = $1 AND id <> $2 AND state IN ({OUT_STATES})",
            pool,
            claim.id,
        )
        assert out is not None  # noqa: S101 - an aggregate always returns a row
        return RemedyFacts(
            node_id=claim.node_id,
            pool=pool,
            in_rollout=in_rollout,
            others_out=out["others"],
            remedies_out=out["remedies"],
        )


async def release_remedy(conn: Conn, node_id: str) -> bool:
    """Release the node's remedy held for approval (``lockstep node approve-remedy``)."""
    row = await conn.fetchval(
        "UPDATE node_work SET lease_until = NULL, updated_at = now() WHERE node_id = $1"
        " AND kind = 'remedy' AND state = 'pending' AND lease_until = 'infinity'"
        " RETURNING id",
        node_id,
    )
    return row is not None


async def release_quarantined(conn: Conn, node_id: str, reason: str) -> str:
    """Record an operator's release of a quarantined node (``lockstep node release``): a
    ``release`` item in the uncordoning step, which the updater runs like any other (it gives
    back Lockstep's drain only, then ends done with ``reason``). Returns the item's id;
    :class:`NotQuarantined` when the node's latest item did not end quarantined."""
    async with conn.transaction():
        # One decision per node at a time (as a remedy's): two releases cannot both pass.
        await conn.execute(
            "SELECT pg_advisory_xact_lock(hashtext('updater-remedy:' || $1))", node_id
        )
        latest = await conn.fetchrow(
            "SELECT state, kind FROM node_work WHERE node_id = $1 ORDER BY id DESC LIMIT 1",
            node_id,
        )
        if latest is None:
            raise NotQuarantined(f"the updater has no work recorded for {node_id}")
        if latest["kind"] == RELEASE and latest["state"] not in TERMINAL_NAMES:
            raise NotQuarantined(f"a release of {node_id} is already under way")
        if latest["state"] != NodeStep.QUARANTINED.value:
            raise NotQuarantined(
                f"{node_id} is not quarantined (its latest work item, kind {latest['kind']}, "
                f"is {latest['state']})"
            )
        release_id = f"release-{uuid.uuid4().hex[:12]}"
        progress = {"ending": NodeStep.DONE.value, "ending_reason": reason}
        await conn.execute(
            "INSERT INTO node_work (rollout_id, wave, node_id, components, kind, state,"
            " progress) VALUES ($1, 0, $2, '{}', 'release', $3, $4)",
            release_id,
            node_id,
            NodeStep.UNCORDONING.value,
            json.dumps(progress),
        )
    return release_id
