"""``FleetChanges``: the inventory's ``fleet.changed`` passed on to the wave snapshots; one
that is malformed, of another type, oversized, or names nothing newer changes nothing."""

from __future__ import annotations

import json

import pytest

from lockstep_common.envelope import make_envelope
from lockstep_common.events.v1 import (
    FleetChanged,
    FleetNode,
    FleetQueryRequested,
    NodeVersion,
    ScopeSelector,
)
from lockstep_common.subjects import Namespace
from lockstep_updater.adapters.fleet_changes import MAX_BYTES, FleetChanges
from lockstep_updater.adapters.wave_facts import WaveFacts


class Inventory:
    def __init__(self) -> None:
        self.asked = 0

    async def nodes(self, scope: ScopeSelector | None) -> list[FleetNode]:
        assert scope is not None
        self.asked += 1
        return [
            FleetNode(
                node_id=n, site="s1", profile="gb200", bmc_url="https://b", credentials="env:B",
                version=3,
            )
            for n in scope.nodes
        ]  # fmt: skip

    async def node(self, node_id: str) -> FleetNode | None:
        return (await self.nodes(ScopeSelector(nodes=(node_id,))))[0]


def announced(*entries: tuple[str, int]) -> bytes:
    changed = FleetChanged(nodes=tuple(NodeVersion(node_id=n, version=v) for n, v in entries))
    return make_envelope(changed, source="/lockstep/inventory").to_json()


async def members() -> list[str]:
    return ["n1", "n2"]


async def snapshot() -> tuple[Inventory, WaveFacts, FleetChanges]:
    inventory = Inventory()
    facts = WaveFacts(inventory)
    changes = FleetChanges(Namespace("t"))
    changes.tell(facts)
    await facts.wave_node("n1", "w", members)
    assert inventory.asked == 1
    return inventory, facts, changes


def hostile() -> list[bytes]:
    good = json.loads(announced(("n1", 9)))
    forged_facts = {**good, "data": {"nodes": [{"node_id": "n1", "version": 9,
                                                "bmc_url": "https://evil"}]}}  # fmt: skip
    return [
        b"",
        b"not json",
        b'{"type": "lockstep.fleet.changed"}',
        json.dumps(forged_facts).encode(),  # facts are not part of it: refused whole
        json.dumps({**good, "data": {"nodes": []}}).encode(),
        json.dumps({**good, "data": {"nodes": [{"node_id": "n1", "version": 0}]}}).encode(),
        json.dumps({**good, "data": {"nodes": [{"node_id": "bad id", "version": 9}]}}).encode(),
        make_envelope(FleetQueryRequested(), source="/x").to_json(),  # another type
        make_envelope(
            FleetChanged(nodes=(NodeVersion(node_id="n1", version=9),)), source="/lockstep/cli"
        ).to_json(),  # not the inventory's
        announced(("n1", 9)) + b" " * MAX_BYTES,  # oversized
    ]


@pytest.mark.parametrize("data", hostile())
async def test_a_malformed_or_hostile_announcement_changes_nothing(data: bytes) -> None:
    inventory, facts, changes = await snapshot()
    assert changes.heard(data) == 0
    await facts.wave_node("n1", "w", members)
    assert inventory.asked == 1  # still served from the copy


async def test_a_repeated_or_older_announcement_changes_nothing() -> None:
    inventory, facts, changes = await snapshot()
    assert changes.heard(announced(("n1", 3), ("n2", 2))) == 2
    await facts.wave_node("n1", "w", members)
    await facts.wave_node("n2", "w", members)
    assert inventory.asked == 1


async def test_a_newer_announcement_has_the_node_read_anew() -> None:
    inventory, facts, changes = await snapshot()
    assert changes.heard(announced(("n2", 4))) == 1
    await facts.wave_node("n1", "w", members)
    assert inventory.asked == 1  # n1 untouched
    await facts.wave_node("n2", "w", members)
    assert inventory.asked == 2


async def test_after_a_reconnect_every_copy_is_read_anew() -> None:
    inventory = Inventory()
    reconnects = [0]
    facts = WaveFacts(inventory, epoch=lambda: reconnects[0])
    await facts.wave_node("n1", "w", members)
    reconnects[0] += 1  # announcements may have been missed meanwhile
    await facts.wave_node("n1", "w", members)
    assert inventory.asked == 2
