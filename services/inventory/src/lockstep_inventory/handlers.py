"""Thin handlers: turn events into reports or facts and hand them to ``ingest``.

Each runs inside the consumer's transaction (inbox claim, state, outbox), so an event is
applied exactly once however often it is delivered.
"""

from __future__ import annotations

import datetime as dt

from lockstep_common import canonical
from lockstep_common.consumer import HandlerContext
from lockstep_common.envelope import Envelope
from lockstep_common.errors import InvalidMessage
from lockstep_common.events.v1 import (
    DeviceActivated,
    DeviceRolledBack,
    DeviceVerified,
    InventoryObserved,
    PinChanged,
    RolloutCompleted,
    RolloutHalted,
    WaveCompleted,
    WavePlanned,
)
from lockstep_inventory import ingest
from lockstep_inventory.adapters import rollouts, state
from lockstep_inventory.domain.observation import Observation
from lockstep_inventory.domain.pins import Pin, scope_key
from lockstep_inventory.domain.rules import CompatibilityRules


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def report_of(data: InventoryObserved) -> Observation:
    """The report an ``InventoryObserved`` event carries.

    The event cannot say "firmware directories not reported" (its default is an empty tuple),
    so directories count as reported only alongside a loaded module version, which an agent
    always sends with them (seed 004 evidence comes as a pair).
    """
    reported = data.loaded_module_version is not None or bool(data.firmware_dirs)
    return Observation(
        source=data.source,
        sequence=data.sequence,
        observed_at=data.observed_at,
        components=dict(data.components),
        members=dict(data.members),
        firmware_dirs=tuple(data.firmware_dirs) if reported else None,
        loaded_module=data.loaded_module_version,
    )


class Handlers:
    """The inventory's handlers, bound to the compatibility rules the service loaded."""

    def __init__(self, rules: CompatibilityRules) -> None:
        self.rules = rules

    async def inventory_observed(
        self, ctx: HandlerContext, envs: list[Envelope[InventoryObserved]]
    ) -> None:
        """A pulled batch of node reports, applied in stream order in one transaction."""
        reports = [(env.data.node_id, report_of(env.data)) for env in envs]
        await ingest.apply_reports(ctx.conn, reports, ctx, now=_now(), rules=self.rules)

    async def pin_changed(self, ctx: HandlerContext, env: Envelope[PinChanged]) -> None:
        """Keep the pin unless a newer one holds its scope, then re-judge the site's nodes."""
        data = env.data
        computed = canonical.stack_hash(data.stack)
        if computed != data.stack_hash:
            # The hash is what admission checks compare: one that does not name this stack
            # would admit jobs onto the wrong versions.
            raise InvalidMessage(
                f"pin.changed stack_hash {data.stack_hash} is not the hash of its stack "
                f"({computed})"
            )
        pin = Pin(
            site=data.site,
            scope=data.scope,
            stack_hash=data.stack_hash,
            stack=data.stack,
            occurred_at=env.occurred_at,
            rollout_id=data.rollout_id,
        )
        if await state.save_pin(ctx.conn, pin, scope_key(data.scope), env.event_id):
            site_nodes = await state.nodes_in_site(ctx.conn, data.site)
            await ingest.rejudge(ctx.conn, site_nodes, ctx, now=_now(), rules=self.rules)

    async def wave_planned(self, ctx: HandlerContext, env: Envelope[WavePlanned]) -> None:
        """A wave starts: its nodes drift as ``pending`` until it ends."""
        data = env.data
        nodes = await rollouts.start_wave(
            ctx.conn, data.rollout_id, data.wave, data.node_ids, env.occurred_at
        )
        await ingest.rejudge(ctx.conn, nodes, ctx, now=_now(), rules=self.rules)

    async def wave_completed(self, ctx: HandlerContext, env: Envelope[WaveCompleted]) -> None:
        """A wave ends: its nodes are judged as they are again."""
        nodes = await rollouts.end_wave(ctx.conn, env.data.rollout_id, env.data.wave)
        await ingest.rejudge(ctx.conn, nodes, ctx, now=_now(), rules=self.rules)

    async def rollout_ended(
        self, ctx: HandlerContext, env: Envelope[RolloutHalted | RolloutCompleted]
    ) -> None:
        """A rollout halts or completes: every wave of it ends."""
        nodes = await rollouts.end_rollout(ctx.conn, env.data.rollout_id)
        await ingest.rejudge(ctx.conn, nodes, ctx, now=_now(), rules=self.rules)

    async def device_changed(
        self, ctx: HandlerContext, env: Envelope[DeviceActivated | DeviceVerified]
    ) -> None:
        """A rollout step moved a device to ``to_version``."""
        await self._record_change(ctx, env, env.data.to_version)

    async def device_rolled_back(
        self, ctx: HandlerContext, env: Envelope[DeviceRolledBack]
    ) -> None:
        """A rollback returned a device to ``from_version`` (when the updater knew it)."""
        if env.data.from_version is not None:
            await self._record_change(ctx, env, env.data.from_version)

    async def _record_change(
        self,
        ctx: HandlerContext,
        env: Envelope[DeviceActivated | DeviceVerified | DeviceRolledBack],
        version: str,
    ) -> None:
        """A difference this change explains is not ``unexpected``."""
        data = env.data
        changed = await rollouts.record_change(
            ctx.conn, data.node_id, data.component, version, data.rollout_id, env.occurred_at
        )
        if changed:
            await ingest.rejudge(ctx.conn, [data.node_id], ctx, now=_now(), rules=self.rules)
