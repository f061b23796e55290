"""A rollout's rows in the updater's store: its approved plan, its attested bundle, its waves
and their work items, rollbacks and halts (``UpdaterTx``'s part for the planner's events).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from lockstep_common.db import Conn
from lockstep_common.events.v1 import AttestedComponent, WavePlanned
from lockstep_common.outbox import EventSink
from lockstep_updater.domain.steps import NodeStep
from lockstep_updater.store import Target


class RolloutRows:
    """The rollout's plan, bundle, waves and halt, on ``conn``."""

    __slots__ = ()
    conn: Conn
    events: EventSink

    async def record_plan(
        self,
        rollout_id: str,
        stack_hash: str,
        nodes: frozenset[str],
        waves: Mapping[str, int] | None = None,
    ) -> None:
        await self.conn.execute(
            "INSERT INTO plans (rollout_id, stack_hash, node_ids, node_waves)"
            " VALUES ($1, $2, $3, $4) ON CONFLICT (rollout_id) DO NOTHING",
            rollout_id,
            stack_hash,
            sorted(nodes),
            json.dumps(dict(sorted((waves or {}).items()))),
        )

    async def plan_waves(self, rollout_id: str) -> dict[str, int]:
        waves = await self.conn.fetchval(
            "SELECT node_waves FROM plans WHERE rollout_id = $1", rollout_id
        )
        return {} if waves is None else {str(k): int(v) for k, v in json.loads(waves).items()}

    async def plan_nodes(self, rollout_id: str) -> frozenset[str] | None:
        nodes = await self.conn.fetchval(
            "SELECT node_ids FROM plans WHERE rollout_id = $1", rollout_id
        )
        return None if nodes is None else frozenset(nodes)

    async def record_bundle(
        self, stack_hash: str, bundle_uri: str | None, components: tuple[AttestedComponent, ...]
    ) -> None:
        body = json.dumps([c.model_dump(mode="json") for c in components])
        await self.conn.execute(
            "INSERT INTO bundles (stack_hash, bundle_uri, components) VALUES ($1, $2, $3)"
            " ON CONFLICT (stack_hash) DO UPDATE SET bundle_uri = EXCLUDED.bundle_uri,"
            " components = EXCLUDED.components, attested_at = now()",
            stack_hash,
            bundle_uri,
            body,
        )

    async def target(self, rollout_id: str) -> Target | None:
        row = await self.conn.fetchrow(
            "SELECT b.stack_hash, b.bundle_uri, b.components FROM plans p"
            " JOIN bundles b ON b.stack_hash = p.stack_hash WHERE p.rollout_id = $1",
            rollout_id,
        )
        return None if row is None else _target(row)

    async def attested(
        self, profile: str, component: str, version: str
    ) -> tuple[Target, AttestedComponent] | None:
        wanted = [{"profile": profile, "component": component, "version": version}]
        row = await self.conn.fetchrow(
            "SELECT stack_hash, bundle_uri, components FROM bundles"
            " WHERE components @> $1::jsonb ORDER BY attested_at DESC, stack_hash LIMIT 1",
            json.dumps(wanted),
        )
        if row is None:
            return None
        target = _target(row)
        entry = next(
            e
            for e in target.components
            if (e.profile, e.component.value, e.version) == (profile, component, version)
        )
        return target, entry

    async def record_wave(self, wave: WavePlanned, correlation_id: str | None) -> bool:
        added = await self.conn.fetchval(
            "INSERT INTO waves (rollout_id, wave, node_ids, max_unavailable, failure_budget,"
            " correlation_id, reflash) VALUES ($1, $2, $3, $4, $5, $6, $7)"
            " ON CONFLICT (rollout_id, wave) DO NOTHING RETURNING true",
            wave.rollout_id,
            wave.wave,
            list(wave.node_ids),
            wave.max_unavailable,
            wave.failure_budget,
            correlation_id,
            sorted(c.value for c in wave.reflash),
        )
        if not added:
            return False
        # A node appears in one wave of a rollout; the first wave naming it keeps it.
        await self.conn.execute(
            "INSERT INTO node_work (rollout_id, wave, node_id, components, correlation_id)"
            " SELECT $1, $2, n, $4, $5 FROM unnest($3::text[]) WITH ORDINALITY AS u(n, i)"
            " ORDER BY i ON CONFLICT (rollout_id, node_id, kind) DO NOTHING",
            wave.rollout_id,
            wave.wave,
            list(wave.node_ids),
            [c.value for c in wave.components],
            correlation_id,
        )
        return True

    async def reflash(self, rollout_id: str, wave: int) -> frozenset[str]:
        found = await self.conn.fetchval(
            "SELECT reflash FROM waves WHERE rollout_id = $1 AND wave = $2", rollout_id, wave
        )
        return frozenset(found or ())

    async def request_rollbacks(self, rollout_id: str, wave: int) -> int:
        rows = await self.conn.fetch(
            "INSERT INTO node_work (rollout_id, wave, node_id, components, correlation_id, kind)"
            " SELECT rollout_id, wave, node_id, components, correlation_id, 'rollback'"
            " FROM node_work WHERE rollout_id = $1 AND wave = $2 AND kind = 'update' ORDER BY id"
            " ON CONFLICT (rollout_id, node_id, kind) DO NOTHING RETURNING id",
            rollout_id,
            wave,
        )
        return len(rows)

    async def update_item(
        self, rollout_id: str, node_id: str
    ) -> tuple[NodeStep, dict[str, Any]] | None:
        row = await self.conn.fetchrow(
            "SELECT state, progress FROM node_work WHERE rollout_id = $1 AND node_id = $2"
            " AND kind = 'update'",
            rollout_id,
            node_id,
        )
        if row is None:
            return None
        return NodeStep(row["state"]), dict(json.loads(row["progress"]))

    async def halt(self, rollout_id: str, reason: str) -> None:
        await self.conn.execute(
            "INSERT INTO halts (rollout_id, reason) VALUES ($1, $2)"
            " ON CONFLICT (rollout_id) DO NOTHING",
            rollout_id,
            reason,
        )


def _target(row: Any) -> Target:
    components = tuple(
        AttestedComponent.model_validate(c, strict=False) for c in json.loads(row["components"])
    )
    return Target(row["stack_hash"], row["bundle_uri"], components)
