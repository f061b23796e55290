"""The inventory's handler flows over the in-memory store: what users see (drift events) for
reports, pins, waves and rollout steps, without PostgreSQL."""

from __future__ import annotations

import datetime as dt
from collections.abc import Awaitable, Callable, Mapping
from typing import TypeVar

import pytest

from lockstep_common import canonical
from lockstep_common.compatibility.files import packaged_rules
from lockstep_common.envelope import Envelope, EventData, make_envelope
from lockstep_common.errors import InvalidMessage
from lockstep_common.events.v1 import (
    DeviceActivated,
    DeviceRolledBack,
    DeviceVerified,
    DriftDetected,
    DriftResolved,
    InventoryObserved,
    PinChanged,
    RolloutHalted,
    ScopeSelector,
    WaveCompleted,
    WavePlanned,
)
from lockstep_common.provenance import source_for
from lockstep_common.testing import RecordedEvents
from lockstep_common.vocabulary import Component, DriftKind, ObservationSource, Severity
from lockstep_inventory import handlers, ingest
from lockstep_inventory.domain.fleet_file import NodeEntry
from lockstep_inventory.ingest import Outcome
from lockstep_inventory.testing import MemoryInventoryStore

pytestmark = pytest.mark.unit
C = Component
RULES = packaged_rules()
SITE = "ams1"
T0 = dt.datetime(2026, 5, 1, 12, tzinfo=dt.UTC)
NODE = NodeEntry(
    id="n1", bmc_url="http://127.0.0.1:8000", profile="gb200", site=SITE, credentials="env:B"
)
D = TypeVar("D", bound=EventData)


def _at(seconds: int) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


class Inventory:
    """The handlers over one in-memory store, recording what they emit."""

    def __init__(self) -> None:
        self.store = MemoryInventoryStore([NODE])
        self.events = RecordedEvents()

    def emitted(self) -> list[DriftDetected | DriftResolved]:
        """Drift events since the last call."""
        out = [e for e in self.events.events if isinstance(e, DriftDetected | DriftResolved)]
        self.events.clear()
        return out

    async def report(
        self,
        seq: int,
        components: Mapping[Component, str],
        *,
        at: dt.datetime | None = None,
        source: ObservationSource = ObservationSource.REDFISH,
        **extra: object,
    ) -> Outcome:
        data = InventoryObserved.model_validate(
            {
                "node_id": NODE.id,
                "site": SITE,
                "source": source,
                "observed_at": at or _at(seq),
                "sequence": seq,
                "components": dict(components),
                "members": {f"{c}_0": v for c, v in components.items()},
                **extra,
            }
        )
        if source is ObservationSource.REDFISH:
            # What a sweep reads it applies itself, never through the bus (``sweeping``).
            return await ingest.apply_reports(
                self.store,
                [(NODE.id, handlers.report_of(data))],
                self.events,
                now=at or _at(seq),
                rules=RULES,
            )
        env = make_envelope(data, source=source_for(data))
        return await handlers.on_inventory_observed(
            self.store, self.events, [env], rules=RULES, now=at or _at(seq)
        )

    async def pin(
        self,
        stack: Mapping[Component, str],
        *,
        seq: int,
        at: dt.datetime = T0,
        stack_hash: str | None = None,
    ) -> Outcome:
        """A pin.changed stored at stream sequence ``seq``, dated ``at`` by its sender."""
        full = {NODE.profile: dict(stack)}
        data = PinChanged(
            site=SITE,
            scope=ScopeSelector(),
            stack_hash=stack_hash or canonical.stack_hash(full),
            stack=full,
        )
        return await handlers.on_pin_changed(
            self.store, self.events, _env(data, at), stream_seq=seq, rules=RULES, now=at
        )

    def kinds(self) -> list[tuple[Component, DriftKind]]:
        """The node's stored drift set."""
        row = self.store.drift_rows[NODE.id]
        return [(i.component, i.kind) for i in row.items]


def _env(data: D, at: dt.datetime) -> Envelope[D]:
    return make_envelope(data, source="/test", occurred_at=at)


@pytest.fixture
async def inventory() -> Inventory:
    inv = Inventory()
    await inv.pin({C.BMC: "b2"}, seq=10)
    await inv.report(1, {C.BMC: "b2"})
    assert inv.emitted() == [] and inv.kinds() == []  # a conforming first report: no event
    return inv


async def test_a_report_repeating_the_stored_versions_changes_nothing_and_emits_nothing(
    inventory: Inventory,
) -> None:
    history = list(inventory.store.history)
    judged = inventory.store.drift_rows[NODE.id]
    outcome = await inventory.report(2, {C.BMC: "b2"})
    assert (outcome.applied, outcome.ignored) == (1, 0)
    assert inventory.emitted() == []
    assert inventory.store.history == history
    assert inventory.store.drift_rows[NODE.id] == judged  # same day: not even re-judged
    stored = (await inventory.store.observations([NODE.id]))[NODE.id][ObservationSource.REDFISH]
    assert (stored.sequence, stored.components) == (2, {C.BMC: "b2"})


async def test_a_silent_revert_is_detected_once_and_its_fix_resolved(
    inventory: Inventory,
) -> None:
    await inventory.report(2, {C.BMC: "b1"})
    [detected] = inventory.emitted()
    assert isinstance(detected, DriftDetected)
    [item] = detected.items
    assert (item.component, item.kind, item.severity) == (
        C.BMC,
        DriftKind.UNEXPECTED,
        Severity.CRITICAL,
    )
    assert (item.expected, item.actual) == ("b2", "b1")
    await inventory.report(3, {C.BMC: "b1"})  # the next sweep sees the same drift
    assert inventory.emitted() == []
    await inventory.report(4, {C.BMC: "b2"})
    [resolved] = inventory.emitted()
    assert isinstance(resolved, DriftResolved) and resolved.node_id == NODE.id


@pytest.mark.parametrize("seq", [5, 4], ids=["duplicate", "stale"])
async def test_a_duplicate_or_stale_report_is_ignored(inventory: Inventory, seq: int) -> None:
    await inventory.report(5, {C.BMC: "b1"})
    assert len(inventory.emitted()) == 1
    outcome = await inventory.report(seq, {C.BMC: "b2"})
    assert (outcome.applied, outcome.ignored) == (0, 1)
    assert inventory.emitted() == []
    assert inventory.kinds() == [(C.BMC, DriftKind.UNEXPECTED)]


async def test_a_pin_whose_hash_is_not_its_stacks_is_refused(inventory: Inventory) -> None:
    before = await inventory.store.pins()
    with pytest.raises(InvalidMessage, match="is not the hash of its stack"):
        await inventory.pin({C.BMC: "b9"}, seq=11, stack_hash="f" * 64)
    assert await inventory.store.pins() == before
    assert inventory.emitted() == []


async def test_a_pin_earlier_in_the_stream_does_not_override_a_later_one(
    inventory: Inventory, caplog: pytest.LogCaptureFixture
) -> None:
    # Redelivered after the held pin, and dated after it too: the stream order decides.
    late = await inventory.pin({C.BMC: "b9"}, seq=9, at=T0 + dt.timedelta(minutes=4))
    assert late == Outcome() and inventory.emitted() == []
    [pin] = await inventory.store.pins()
    assert pin.stack == {NODE.profile: {C.BMC: "b2"}}
    assert "(stream sequence 9) for site ams1 ignored" in caplog.text
    await inventory.pin({C.BMC: "b3"}, seq=12, at=T0 - dt.timedelta(days=365))  # a later one
    [detected] = inventory.emitted()
    assert isinstance(detected, DriftDetected) and detected.items[0].expected == "b3"


async def test_a_pin_dated_ahead_does_not_outrank_the_pins_after_it(
    inventory: Inventory,
) -> None:
    # Issue 15: a pin dated far ahead (within the allowed skew, or before the consumer refused
    # such times) made every genuine `lockstep fleet pin` after it change nothing.
    await inventory.pin({C.BMC: "b6"}, seq=11, at=dt.datetime(2999, 1, 1, tzinfo=dt.UTC))
    inventory.emitted()
    await inventory.pin({C.BMC: "b2"}, seq=12, at=T0)  # the genuine pin, next in the stream
    [resolved] = inventory.emitted()
    assert isinstance(resolved, DriftResolved)
    [pin] = await inventory.store.pins()
    assert (pin.stack, pin.sequence) == ({NODE.profile: {C.BMC: "b2"}}, 12)


async def _wave_planned(inv: Inventory, wave: int, seq: int) -> Outcome:
    data = WavePlanned(
        rollout_id="r1",
        wave=wave,
        node_ids=(NODE.id,),
        components=(C.BMC,),
        max_unavailable=1,
        failure_budget=0,
        soak_seconds=0,
    )
    return await handlers.on_wave_planned(
        inv.store, inv.events, _env(data, _at(seq)), stream_seq=seq, rules=RULES, now=_at(seq)
    )


async def _wave_completed(inv: Inventory, wave: int, at: dt.datetime) -> Outcome:
    data = WaveCompleted(rollout_id="r1", wave=wave, succeeded=(NODE.id,), failed=())
    return await handlers.on_wave_completed(
        inv.store, inv.events, _env(data, at), rules=RULES, now=at
    )


async def _rollout_halted(inv: Inventory, wave: int, at: dt.datetime) -> Outcome:
    data = RolloutHalted(rollout_id="r1", wave=wave, reason="gate tripped", halted_by="gate")
    return await handlers.on_rollout_ended(
        inv.store, inv.events, _env(data, at), rules=RULES, now=at
    )


Ending = Callable[[Inventory, int, dt.datetime], Awaitable[Outcome]]


async def test_a_wave_makes_drift_pending_and_its_end_unpends_it(inventory: Inventory) -> None:
    await _wave_planned(inventory, 0, 10)
    assert inventory.emitted() == []  # nothing differs yet
    await inventory.report(20, {C.BMC: "b3"})  # the rollout at work
    [pending] = inventory.emitted()
    assert isinstance(pending, DriftDetected)
    assert [(i.kind, i.severity) for i in pending.items] == [(DriftKind.PENDING, Severity.INFO)]
    await _wave_completed(inventory, 0, _at(30))
    [after] = inventory.emitted()
    assert isinstance(after, DriftDetected)
    assert [i.kind for i in after.items] == [DriftKind.UNEXPECTED]  # no longer explained


@pytest.mark.parametrize("end", [_wave_completed, _rollout_halted], ids=["wave", "rollout"])
async def test_a_wave_planned_after_its_wave_ended_does_not_reopen_it(
    inventory: Inventory, end: Ending
) -> None:
    await end(inventory, 0, _at(10))
    late = await _wave_planned(inventory, 0, 5)  # retried out of order
    assert late == Outcome()
    await inventory.report(20, {C.BMC: "b3"})
    [detected] = inventory.emitted()
    assert isinstance(detected, DriftDetected)
    assert [i.kind for i in detected.items] == [DriftKind.UNEXPECTED]


async def test_a_recorded_device_step_explains_a_change(inventory: Inventory) -> None:
    step = DeviceActivated(rollout_id="r1", node_id=NODE.id, component=C.BMC, to_version="b3")
    await handlers.on_device_step(
        inventory.store,
        inventory.events,
        _env(step, _at(10)),
        stream_seq=10,
        rules=RULES,
        now=_at(10),
    )
    assert inventory.emitted() == []  # the node still runs its pinned version
    await inventory.report(20, {C.BMC: "b3"})
    [detected] = inventory.emitted()
    assert isinstance(detected, DriftDetected)
    assert [(i.kind, i.severity) for i in detected.items] == [(DriftKind.PENDING, Severity.WARNING)]


async def test_a_rollback_without_a_known_version_records_nothing(inventory: Inventory) -> None:
    back = DeviceRolledBack(
        rollout_id="r1", node_id=NODE.id, component=C.BMC, to_version="b3", reason="verify failed"
    )
    outcome = await handlers.on_device_step(
        inventory.store,
        inventory.events,
        _env(back, _at(10)),
        stream_seq=10,
        rules=RULES,
        now=_at(10),
    )
    assert outcome == Outcome() and inventory.store.steps == {}


async def test_a_device_step_earlier_in_the_stream_does_not_replace_the_recorded_one(
    inventory: Inventory,
) -> None:
    async def step(version: str, seq: int, at: dt.datetime) -> None:
        data = DeviceVerified(rollout_id="r1", node_id=NODE.id, component=C.BMC, to_version=version)
        await handlers.on_device_step(
            inventory.store, inventory.events, _env(data, at), stream_seq=seq, rules=RULES, now=at
        )

    await step("b3", 20, _at(0))
    # Earlier in the stream, dated later by its sender: changes nothing.
    await step("b4", 19, dt.datetime(2999, 1, 1, tzinfo=dt.UTC))
    await inventory.report(30, {C.BMC: "b3"})
    [detected] = inventory.emitted()
    assert isinstance(detected, DriftDetected)
    assert [i.kind for i in detected.items] == [DriftKind.PENDING]


async def test_a_branch_reaching_end_of_life_is_found_on_the_next_day_without_a_change() -> None:
    # R570 reaches end of life on 2026-02-28 (rules table): a node that keeps reporting the
    # same R570 tuple is re-judged on the first report of a later day and drifts again.
    inv = Inventory()
    r570 = {C.DRIVER: "570.172.08", C.CUDA: "12.8"}
    agent = ObservationSource.AGENT
    evidence = {"loaded_module_version": "570.172.08", "firmware_dirs": ("570.172.08",)}
    before = dt.datetime(2026, 2, 27, 9, tzinfo=dt.UTC)
    later = dt.datetime(2026, 2, 27, 23, tzinfo=dt.UTC)
    after = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)
    await inv.report(1, r570, at=before, source=agent, **evidence)
    assert inv.emitted() == []  # no pin: everything unknown, which is not announced
    await inv.report(2, r570, at=later, source=agent, **evidence)
    assert inv.emitted() == []  # same day, same versions: not re-judged
    await inv.report(3, r570, at=after, source=agent, **evidence)
    [event] = inv.emitted()
    assert isinstance(event, DriftDetected)
    assert any("end of life" in i.detail for i in event.items)


async def test_a_report_observed_after_it_was_sent_is_refused(inventory: Inventory) -> None:
    # Sent now, "observed" next year: it would outrank every genuine report until then.
    with pytest.raises(InvalidMessage, match="after it was sent"):
        await inventory.report(
            2,
            {C.BMC: "b9"},
            at=dt.datetime.now(dt.UTC) + dt.timedelta(days=365),
            source=ObservationSource.AGENT,
        )
    assert inventory.emitted() == [] and inventory.kinds() == []


async def test_a_report_off_the_bus_that_says_a_bmc_was_read_is_refused(
    inventory: Inventory,
) -> None:
    # Issue 26: a node agent's credential published a "redfish" report that made a node
    # drifted; only the inventory's own sweep reads BMCs, and it does not use the bus.
    forged = InventoryObserved(
        node_id=NODE.id,
        site=SITE,
        source=ObservationSource.REDFISH,
        observed_at=_at(50),
        sequence=900_000,
        components={C.BMC: "b-evil"},
        members={"bmc_0": "b-evil"},
    )
    env = make_envelope(forged, source=source_for(forged), occurred_at=_at(50))
    with pytest.raises(InvalidMessage, match="only the inventory's own sweep"):
        await handlers.on_inventory_observed(
            inventory.store, inventory.events, [env], rules=RULES, now=_at(50)
        )
    assert inventory.emitted() == [] and inventory.kinds() == []
    await inventory.report(51, {C.BMC: "b2"})  # the next sweep is still taken
    stored, _ = inventory.store.reports[(NODE.id, ObservationSource.REDFISH)]
    assert stored.sequence == 51
