"""Thin handlers: turn events into reports or facts and hand them to ``ingest``.

What each event changes is a function of a store, an event sink, the rules, the time and the
event (``on_*``), so it is unit-tested with ``testing.MemoryInventoryStore`` and
``RecordedEvents``. :class:`Handlers` binds them to the rules; ``router.py`` runs each inside
the consumer's transaction (inbox claim, state, outbox: ``pg_store.joined``), so an event is
applied exactly once however often it is delivered.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Sequence

from lockstep_common import canonical
from lockstep_common.compatibility.rules import CompatibilityRules
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
from lockstep_common.outbox import EventSink
from lockstep_common.vocabulary import ObservationSource
from lockstep_inventory import ingest
from lockstep_inventory.domain.observation import ImplausibleReport, Observation
from lockstep_inventory.domain.pins import Pin, scope_key
from lockstep_inventory.store import InventoryStore, InventoryTx, NodeStore

log = logging.getLogger(__name__)
OBSERVED_AFTER_SENT = dt.timedelta(seconds=1)  # rounding, not clocks: one sender stamps both


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


async def on_inventory_observed(
    store: NodeStore,
    sink: EventSink,
    envs: Sequence[Envelope[InventoryObserved]],
    *,
    rules: CompatibilityRules,
    now: dt.datetime,
) -> ingest.Outcome:
    """A pulled batch of node reports, applied in stream order.

    Only node agents publish reports (``provenance``): a report that says it was read from a
    BMC is refused, since only the inventory's own sweep reads BMCs and it applies what it
    reads itself. Accepted, it would stand for the sweep (issue 26: one made a node drifted,
    and its sequence held off the sweeps after it)."""
    for env in envs:
        if env.data.source is not ObservationSource.AGENT:
            raise InvalidMessage(
                f"report for {env.data.node_id} on the bus says its source is "
                f"{env.data.source}: only the inventory's own sweep reports what a BMC says"
            )
        # The envelope's time is bounded by the runtime's clock-skew check; a report observed
        # after it was sent would carry a forged future into every "newer report" decision.
        if env.data.observed_at > env.occurred_at + OBSERVED_AFTER_SENT:
            raise ImplausibleReport(
                f"report for {env.data.node_id} says it was observed at "
                f"{env.data.observed_at.isoformat()}, after it was sent "
                f"({env.occurred_at.isoformat()})"
            )
    reports = [(env.data.node_id, report_of(env.data)) for env in envs]
    return await ingest.apply_reports(store, reports, sink, now=now, rules=rules)


async def on_pin_changed(
    store: InventoryStore,
    sink: EventSink,
    env: Envelope[PinChanged],
    *,
    stream_seq: int,
    rules: CompatibilityRules,
    now: dt.datetime,
) -> ingest.Outcome:
    """Keep the pin unless a newer one holds its scope, then re-judge the site's nodes.

    Newer means later in the PINS stream (``stream_seq``, the broker's order), never a later
    ``occurred_at``: the sender's clock decides nothing (``domain.pins``)."""
    data = env.data
    computed = canonical.stack_hash(data.stack)
    if computed != data.stack_hash:
        # The hash is what admission checks compare: one that does not name this stack
        # would admit jobs onto the wrong versions.
        raise InvalidMessage(
            f"pin.changed stack_hash {data.stack_hash} is not the hash of its stack ({computed})"
        )
    pin = Pin(
        site=data.site,
        scope=data.scope,
        stack_hash=data.stack_hash,
        stack=data.stack,
        sequence=stream_seq,
        occurred_at=env.occurred_at,
        rollout_id=data.rollout_id,
    )
    if not await store.save_pin(pin, scope_key(data.scope), env.event_id):
        # Rare (a retried pin overtaken by a later one, or a PINS stream created again), and
        # an operator whose `lockstep fleet pin` changed nothing must be able to find out why.
        log.warning(
            "pin.changed %s (stream sequence %d) for site %s ignored: a pin later in the "
            "stream holds its scope",
            env.event_id,
            stream_seq,
            data.site,
        )
        return ingest.Outcome()
    site_nodes = await store.nodes_in_site(data.site)
    return await ingest.rejudge(store, site_nodes, sink, now=now, rules=rules)


async def on_wave_planned(
    store: InventoryStore,
    sink: EventSink,
    env: Envelope[WavePlanned],
    *,
    stream_seq: int,
    rules: CompatibilityRules,
    now: dt.datetime,
) -> ingest.Outcome:
    """A wave starts: its nodes drift as ``pending`` until it ends. A node in several active
    waves is in the one planned latest in the stream (``stream_seq``)."""
    data = env.data
    nodes = await store.start_wave(data.rollout_id, data.wave, data.node_ids, stream_seq)
    return await ingest.rejudge(store, nodes, sink, now=now, rules=rules)


async def on_wave_completed(
    store: InventoryStore,
    sink: EventSink,
    env: Envelope[WaveCompleted],
    *,
    rules: CompatibilityRules,
    now: dt.datetime,
) -> ingest.Outcome:
    """A wave ends: its nodes are judged as they are again."""
    nodes = await store.end_wave(env.data.rollout_id, env.data.wave)
    return await ingest.rejudge(store, nodes, sink, now=now, rules=rules)


async def on_rollout_ended(
    store: InventoryStore,
    sink: EventSink,
    env: Envelope[RolloutHalted | RolloutCompleted],
    *,
    rules: CompatibilityRules,
    now: dt.datetime,
) -> ingest.Outcome:
    """A rollout halts or completes: every wave of it ends."""
    nodes = await store.end_rollout(env.data.rollout_id)
    return await ingest.rejudge(store, nodes, sink, now=now, rules=rules)


async def on_device_step(
    store: InventoryStore,
    sink: EventSink,
    env: Envelope[DeviceActivated | DeviceVerified | DeviceRolledBack],
    *,
    stream_seq: int,
    rules: CompatibilityRules,
    now: dt.datetime,
) -> ingest.Outcome:
    """A rollout step moved a device: to ``to_version`` (activated, verified), or back to
    ``from_version`` (rolled back; nothing when the updater did not know it). A difference
    the recorded version explains is not ``unexpected``. A step earlier in the stream
    (``stream_seq``) than the one recorded changes nothing."""
    data = env.data
    version = data.from_version if isinstance(data, DeviceRolledBack) else data.to_version
    if version is None:
        return ingest.Outcome()
    changed = await store.record_change(
        data.node_id, data.component, version, data.rollout_id, stream_seq
    )
    if not changed:
        return ingest.Outcome()
    return await ingest.rejudge(store, [data.node_id], sink, now=now, rules=rules)


class Handlers:
    """The inventory's handlers (``lockstep_common.stores.Handler``), bound to the
    compatibility rules the service loaded: each runs its ``on_*`` function on the unit of work
    ``router.py`` joins to the consumer's transaction."""

    def __init__(self, rules: CompatibilityRules) -> None:
        self.rules = rules

    async def inventory_observed(
        self, tx: InventoryTx, envs: Sequence[Envelope[InventoryObserved]], *, now: dt.datetime
    ) -> None:
        """A pulled batch of node reports, applied in stream order in one transaction."""
        await on_inventory_observed(tx, tx.events, envs, rules=self.rules, now=now)

    async def pin_changed(
        self, tx: InventoryTx, env: Envelope[PinChanged], *, now: dt.datetime
    ) -> None:
        """A new pin for a scope (``on_pin_changed``), ordered by its stream sequence."""
        seq = tx.stream_seq(env)
        await on_pin_changed(tx, tx.events, env, stream_seq=seq, rules=self.rules, now=now)

    async def wave_planned(
        self, tx: InventoryTx, env: Envelope[WavePlanned], *, now: dt.datetime
    ) -> None:
        """A wave starts (``on_wave_planned``)."""
        seq = tx.stream_seq(env)
        await on_wave_planned(tx, tx.events, env, stream_seq=seq, rules=self.rules, now=now)

    async def wave_completed(
        self, tx: InventoryTx, env: Envelope[WaveCompleted], *, now: dt.datetime
    ) -> None:
        """A wave ends (``on_wave_completed``)."""
        await on_wave_completed(tx, tx.events, env, rules=self.rules, now=now)

    async def rollout_ended(
        self, tx: InventoryTx, env: Envelope[RolloutHalted | RolloutCompleted], *, now: dt.datetime
    ) -> None:
        """A rollout halts or completes (``on_rollout_ended``)."""
        await on_rollout_ended(tx, tx.events, env, rules=self.rules, now=now)

    async def device_changed(
        self,
        tx: InventoryTx,
        env: Envelope[DeviceActivated | DeviceVerified | DeviceRolledBack],
        *,
        now: dt.datetime,
    ) -> None:
        """A rollout step moved a device: to ``to_version``, or back to ``from_version``
        (``on_device_step``)."""
        seq = tx.stream_seq(env)
        await on_device_step(tx, tx.events, env, stream_seq=seq, rules=self.rules, now=now)
