"""examples/stacks/*.yaml pin exactly what a freshly started simulated node runs (issue 14,
item 5): pinning one on `lockstep sim serve`'s fleet leaves it conforming, not drifting."""

from __future__ import annotations

from pathlib import Path

import pytest

from lockstep_cli.fleet_bus import parse_stack
from lockstep_inventory.domain.members import versions_of
from lockstep_inventory.domain.pins import stack_of
from lockstep_redfish.profile import profile_named
from lockstep_sim.agents.reports import components
from lockstep_sim.agents.software import NodeSoftware
from lockstep_sim.fleet import build_fleet

SIM = profile_named("lockstep-sim")  # what the simulator's default dialect matches
pytestmark = pytest.mark.unit
EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "stacks"


@pytest.mark.parametrize("profile", ["gb200", "hgx-h100"])
def test_the_example_stack_is_what_a_simulated_node_runs(profile: str) -> None:
    path = EXAMPLES / f"{profile}.yaml"
    stack = parse_stack(path.read_text(), str(path))
    node = build_fleet(1, profile, seed=7)[0]
    # The simulator's own dialect: the lockstep-sim BMC profile's member rows.
    grouped = versions_of({m: c.version for m, c in node.components.items()}, SIM)
    runs = stack_of(grouped.versions, grouped.conflicts)
    runs.update(components(NodeSoftware(node.id).state))
    assert stack == {profile: runs}
