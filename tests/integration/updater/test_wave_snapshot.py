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
from lockstep_updater.domain.steps import NodeStep
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
