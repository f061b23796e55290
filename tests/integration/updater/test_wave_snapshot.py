"""The executor served from its wave's snapshot of node facts (issue 28 item 3) against the
simulator's BMCs: a node re-registered between two steps is read anew before the next write,
which goes where its new entry says."""

from __future__ import annotations

import pytest

from lockstep_common.envelope import make_envelope
from lockstep_common.events.v1 import FleetChanged, FleetNode, NodeVersion, ScopeSelector
from lockstep_common.subjects import Namespace
from lockstep_updater.adapters.fleet_changes import FleetChanges
from lockstep_updater.adapters.wave_facts import WaveFacts
from lockstep_updater.domain.steps import OUT_OF_SERVICE, NodeStep
from lockstep_updater.testing.sim_fleet import SimFacts
from tests.integration.updater.conftest import World
from tests.integration.updater.test_executor_sim import nodes_of, plan_and_release

pytestmark = pytest.mark.integration


class Registry:
    """The inventory's registry as ``fleet.query`` answers it, versioned, counting pages."""

    def __init__(self, facts: SimFacts) -> None:
        self.entries = {k: n.model_copy(update={"version": 1}) for k, n in facts.nodes.items()}
        self.asked: list[tuple[str, ...]] = []

    async def nodes(self, scope: ScopeSelector | None) -> list[FleetNode]:
        assert scope is not None
        self.asked.append(scope.nodes)
        return [self.entries[n] for n in scope.nodes if n in self.entries]

    async def node(self, node_id: str) -> FleetNode | None:
        self.asked.append((node_id,))
        return self.entries.get(node_id)

    def reregister(self, node_id: str, **fields: str) -> bytes:
        """Change the node's entry as a re-import does; the announcement of it."""
        old = self.entries[node_id]
        new = old.model_copy(update={**fields, "version": old.version + 1})
        self.entries[node_id] = new
        changed = FleetChanged(nodes=(NodeVersion(node_id=node_id, version=new.version),))
        return make_envelope(changed, source="/lockstep/inventory").to_json()


async def test_a_bmc_moved_between_two_steps_gets_the_push_at_its_new_address(
    world: World,
) -> None:
    w = world
    node, other = nodes_of(w, 2)
    await plan_and_release(w, (node,))
    registry = Registry(w.facts)
    facts = WaveFacts(registry)
    changes = FleetChanges(Namespace("snap"))
    changes.tell(facts)
    ex = w.executor(one_step_a_claim=True)
    ex.facts = facts
    assert await ex.step()  # preflight, from the wave's snapshot
    assert w.store.item(node).state is NodeStep.STAGING and registry.asked == [(node,)]
    # Re-registered: the node's BMC is now reached at the address of the other simulated BMC.
    assert changes.heard(registry.reregister(node, bmc_url=w.rt.bmc_url(other))) == 1
    await w.settle(ex)
    assert w.store.item(node).state is NodeStep.DONE
    assert w.pushes(node) == []  # nothing went to the address it had
    assert len(w.pushes(other)) == 1
    assert registry.asked[1] == (node,)  # read anew, then served from the copy again


async def test_a_node_moved_into_a_full_pool_between_two_steps_waits_for_its_budget(
    world: World,
) -> None:
    """The guard counts the pool the node is in now: moved into the pool whose one place the
    other node of the wave holds, it parks in cordoning instead of leaving service."""
    w = world
    node, other = nodes_of(w, 2)
    await plan_and_release(w, (other, node), max_unavailable=1)
    registry = Registry(w.facts)
    registry.entries[other] = registry.entries[other].model_copy(update={"pool": "p1"})
    registry.entries[node] = registry.entries[node].model_copy(update={"pool": "p2"})
    facts = WaveFacts(registry)
    changes = FleetChanges(Namespace("snap"))
    changes.tell(facts)
    w.rt.scheduler.occupy([other], duration_s=1e9)  # a job keeps `other` draining
    ex = w.executor()
    ex.facts = facts
    assert await ex.step()  # `other` runs until its first wait, out of service in p1
    assert w.store.item(other).state in OUT_OF_SERVICE
    assert registry.asked == [(other, node)]  # the wave read at once, `node` with it
    changes.heard(registry.reregister(node, pool="p1"))
    for _ in range(100):  # until `node` asked for its place (a wait moves the store's clock)
        if w.store.item(node).state not in {NodeStep.PENDING, NodeStep.PREFLIGHT, NodeStep.STAGING}:
            break
        if not await ex.step():
            w.store.advance(1.0)
    item = w.store.item(node)
    assert item.state is NodeStep.CORDONING, (item.state, item.reason)
    assert item.reason == "pool p1 has 1 node(s) out of service, max_unavailable 1"
    assert w.rt.scheduler.node(node).drain is None  # never left service
