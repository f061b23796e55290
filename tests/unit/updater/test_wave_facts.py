"""``WaveFacts``: a wave's nodes read a page at a time once, served from versioned, bounded
copies, re-read when their registry entry is announced newer or the copy is ``ttl_s`` old."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from lockstep_common.clock import ManualClock
from lockstep_common.events.v1 import MAX_FLEET_PAGE, FleetNode, ScopeSelector
from lockstep_updater.adapters.wave_facts import WaveFacts


def entry(node_id: str, version: int = 1, **fields: str) -> FleetNode:
    values = {
        "node_id": node_id,
        "site": "s1",
        "profile": "gb200",
        "pool": "p1",
        "bmc_url": f"https://{node_id}.bmc",
        "credentials": "env:BMC",
        **fields,
    }
    return FleetNode.model_validate({**values, "version": version})


class Inventory:
    """The registry, counting what is asked of it."""

    def __init__(self, nodes: list[FleetNode]) -> None:
        self.registry = {n.node_id: n for n in nodes}
        self.pages: list[tuple[str, ...]] = []
        self.singles: list[str] = []
        self.extra: list[FleetNode] = []

    async def nodes(self, scope: ScopeSelector | None) -> list[FleetNode]:
        assert scope is not None and len(scope.nodes) <= MAX_FLEET_PAGE
        self.pages.append(scope.nodes)
        await asyncio.sleep(0)  # another claim loop may run meanwhile
        return [self.registry[n] for n in scope.nodes if n in self.registry] + self.extra

    async def node(self, node_id: str) -> FleetNode | None:
        self.singles.append(node_id)
        return self.registry.get(node_id)


def ids(count: int) -> list[str]:
    return [f"n{i:05d}" for i in range(count)]


def rig(
    count: int, *, ttl_s: float = 60.0, max_nodes: int = 100
) -> tuple[Inventory, WaveFacts, ManualClock]:
    inventory = Inventory([entry(n) for n in ids(count)])
    clock = ManualClock()
    facts = WaveFacts(inventory, clock=clock, ttl_s=ttl_s, max_nodes=max_nodes)
    return inventory, facts, clock


def members_of(count: int) -> Callable[[], Awaitable[list[str]]]:
    async def members() -> list[str]:
        return ids(count)

    return members


async def test_a_wave_is_read_one_request_per_page_and_its_steps_served_from_the_copy() -> None:
    inventory, facts, _ = rig(1200, max_nodes=2000)
    members = members_of(1200)
    for node_id in ids(1200):  # every node's step, three times over
        for _ in range(3):
            got = await facts.wave_node(node_id, ("r1", 0), members)
            assert got is not None and got.node_id == node_id
    assert [len(p) for p in inventory.pages] == [500, 500, 200]
    assert inventory.singles == []


async def test_claim_loops_that_miss_together_wait_for_one_read() -> None:
    inventory, facts, _ = rig(40)
    members = members_of(40)
    got = await asyncio.gather(*(facts.wave_node(n, ("r1", 0), members) for n in ids(40)))
    assert [g.node_id for g in got if g is not None] == ids(40)
    assert len(inventory.pages) == 1


async def test_a_node_announced_newer_is_read_again_with_its_new_bmc_and_pool() -> None:
    inventory, facts, _ = rig(3)
    members = members_of(3)
    await facts.wave_node("n00001", ("r1", 0), members)
    inventory.registry["n00001"] = entry(
        "n00001", 2, bmc_url="https://moved.bmc", pool="p2"
    )  # re-registered between two steps
    facts.changed("n00001", 2)
    got = await facts.wave_node("n00001", ("r1", 0), members)
    assert got is not None and (got.bmc_url, got.pool) == ("https://moved.bmc", "p2")
    # Only that node was read again; the others are still served from the copy.
    assert inventory.pages == [tuple(ids(3)), ("n00001",)]
    await facts.wave_node("n00000", ("r1", 0), members)
    assert len(inventory.pages) == 2


@pytest.mark.parametrize("version", [0, 1, -5])
async def test_an_announcement_not_newer_than_the_copy_changes_nothing(version: int) -> None:
    inventory, facts, _ = rig(2)
    await facts.wave_node("n00000", ("r1", 0), members_of(2))
    facts.changed("n00000", version)  # a duplicate, replayed or forged announcement
    facts.changed("no-such-node", 7)
    await facts.wave_node("n00000", ("r1", 0), members_of(2))
    assert len(inventory.pages) == 1 and inventory.singles == []


async def test_a_change_announced_before_it_is_visible_keeps_the_node_re_read_until_it_is() -> None:
    inventory, facts, _ = rig(2)
    facts.changed("n00000", 5)  # the inventory still answers version 1
    for _ in range(2):
        got = await facts.wave_node("n00000", ("r1", 0), members_of(2))
        assert got is not None and got.version == 1
    assert len(inventory.pages) == 2 and inventory.singles == []  # asked each time, once
    inventory.registry["n00000"] = entry("n00000", 5, bmc_url="https://new.bmc")
    got = await facts.wave_node("n00000", ("r1", 0), members_of(2))
    assert got is not None and got.bmc_url == "https://new.bmc"
    asked = len(inventory.pages) + len(inventory.singles)
    await facts.wave_node("n00000", ("r1", 0), members_of(2))
    assert len(inventory.pages) + len(inventory.singles) == asked  # kept now


async def test_a_copy_is_read_again_once_it_is_ttl_old_announced_or_not() -> None:
    inventory, facts, clock = rig(2, ttl_s=30.0)
    await facts.wave_node("n00000", ("r1", 0), members_of(2))
    clock.advance(29.0)
    await facts.wave_node("n00000", ("r1", 0), members_of(2))
    assert len(inventory.pages) == 1
    clock.advance(1.0)
    await facts.wave_node("n00000", ("r1", 0), members_of(2))
    assert len(inventory.pages) == 2


async def test_copies_are_bounded_least_recently_used_first() -> None:
    inventory, facts, _ = rig(10, max_nodes=4)
    for node_id in ids(10):
        await facts.node(node_id)
    assert len(facts) == 4
    await facts.node("n00009")
    await facts.node("n00000")
    assert inventory.singles.count("n00009") == 1 and inventory.singles.count("n00000") == 2


async def test_a_node_outside_its_wave_list_or_the_answer_is_asked_on_its_own() -> None:
    inventory, facts, _ = rig(3)
    got = await facts.wave_node("n00002", ("remedy-1", 0), members_of(0))  # no wave
    assert got is not None and inventory.singles == ["n00002"] and inventory.pages == []
    assert await facts.wave_node("gone", ("r1", 0), members_of(3)) is None
    assert inventory.singles == ["n00002", "gone"]


async def test_nodes_an_answer_adds_unasked_are_not_kept() -> None:
    inventory, facts, _ = rig(2)
    inventory.extra = [entry("intruder", 9)]
    await facts.wave_node("n00000", ("r1", 0), members_of(2))
    assert len(facts) == 2
    assert await facts.node("intruder") is None  # asked of the inventory, which has none


async def test_forget_all_drops_every_copy() -> None:
    inventory, facts, _ = rig(2)
    await facts.wave_node("n00000", ("r1", 0), members_of(2))
    facts.forget_all()
    await facts.wave_node("n00000", ("r1", 0), members_of(2))
    assert len(inventory.pages) == 2


def test_bounds_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        WaveFacts(Inventory([]), ttl_s=0)
