"""A plan whose canary the healthgate could never judge is refused before approval (issue 31):
a stratum too small for the gate policy's minimum canary and control would hold the canary's
gate inconclusive forever, and the only way on would be a ``resume`` with no evidence."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest

from lockstep_common.compatibility.files import packaged_rules
from lockstep_common.envelope import make_envelope
from lockstep_common.errors import ConfigurationError
from lockstep_common.events.v1 import RolloutHalted, RolloutPlanned, ScopeSelector
from lockstep_planner.adapters.policy_file import gate_minimum, packaged_policy
from lockstep_planner.app import load_gate_minimum
from lockstep_planner.domain.fleet import Node
from lockstep_planner.domain.judgeable import GateMinimum
from lockstep_planner.domain.plan import plan
from lockstep_planner.domain.refusal import PlanRefused
from lockstep_planner.handlers import on_bundle_attested, on_intent_submitted, rollout_id_of
from lockstep_planner.lifecycle import Timing
from lockstep_planner.planning import Planning
from lockstep_planner.settings import Settings
from lockstep_planner.testing.kit import attested, fleet_node, intent
from lockstep_planner.testing.memory_store import MemoryFleet, MemoryStore
from lockstep_planner.worker import PlannerWorker
from tests.unit.planner.fleets import NOW, node, request

pytestmark = pytest.mark.unit
PACKAGED = GateMinimum(5, 5)


def mixed_fleet() -> list[Node]:
    """30 gb200 nodes (judgeable), 8 h100 (canary 5, control 3) and 3 gb300 (canary 3, none)."""
    return (
        [node(i) for i in range(30)]
        + [node(f"h{i}", profile="h100") for i in range(8)]
        + [node(f"g{i}", profile="gb300") for i in range(3)]
    )


def test_the_packaged_gate_policy_minimum_is_read() -> None:
    assert gate_minimum(None) == PACKAGED


def test_a_stratum_too_small_for_the_gate_is_refused_naming_it_its_size_and_the_minimum() -> None:
    with pytest.raises(PlanRefused) as refused:
        plan(request(mixed_fleet(), gate_minimum=PACKAGED), now=NOW)
    reasons = refused.value.reasons
    assert len(reasons) == 2, reasons
    h100, gb300 = sorted(reasons, key=lambda r: "gb300" in r)
    assert h100.startswith("stratum h100/acme/aaaaaaaaaaaa has 8 node(s) in scope: canary 5, ")
    assert "control 3, but the gate policy's minimum is 5 canary and 5 control" in h100
    assert "has 3 node(s) in scope: canary 3, control 0" in gb300
    assert "leave it out of scope" in gb300 and "gb200" not in " ".join(reasons)


def test_leaving_the_small_strata_out_of_scope_plans() -> None:
    made = plan(
        request(mixed_fleet(), gate_minimum=PACKAGED, scope=ScopeSelector(profiles=("gb200",))),
        now=NOW,
    )
    [cover] = made.strata
    assert (len(cover.canary), len(cover.controls)) == (5, 5)


def test_exactly_the_minimum_plans_and_one_node_fewer_is_refused() -> None:
    plan(request([node(i) for i in range(10)], gate_minimum=PACKAGED), now=NOW)
    with pytest.raises(PlanRefused, match="has 9 node"):
        plan(request([node(i) for i in range(9)], gate_minimum=PACKAGED), now=NOW)


def test_a_larger_gate_minimum_than_the_class_picks_is_refused_too() -> None:
    """A gate policy raised to 8 canary nodes while the class picks 5: inconclusive forever."""
    with pytest.raises(PlanRefused, match=r"canary 5, control 5, but .* minimum is 8 canary"):
        plan(request([node(i) for i in range(40)], gate_minimum=GateMinimum(8, 8)), now=NOW)


def test_without_a_gate_minimum_the_plan_is_not_checked() -> None:
    """What-if tools (the benches) plan without a healthgate policy."""
    assert plan(request(mixed_fleet()), now=NOW).strata


def test_many_small_strata_stay_one_readable_refusal() -> None:
    fleet = [node(f"x{p}-{i}", profile=f"p{p}") for p in range(9) for i in range(2)]
    with pytest.raises(PlanRefused) as refused:
        plan(request(fleet, gate_minimum=PACKAGED), now=NOW)
    assert len(refused.value.reasons) == 6
    assert refused.value.reasons[-1] == "and 4 more strata under the gate policy's minimum"


async def test_the_service_refuses_such_an_intent_before_approval() -> None:
    store = MemoryStore()
    bundle = attested()
    async with store.transaction() as tx:
        await on_bundle_attested(tx, make_envelope(bundle, source="/test"), now=store.now)
    worker = PlannerWorker(
        Planning(packaged_policy(), 4, Timing(), {}, rules=packaged_rules(), gate_minimum=PACKAGED),
        store=lambda _: store,
        fleet=lambda _: MemoryFleet(()),
        poll_s=0.01,
        lease_s=60,
        max_attempts=3,
    )
    data = intent(bundle)
    async with store.transaction() as tx:
        await on_intent_submitted(tx, make_envelope(data, source="/test"), now=store.now)
    await worker.intent(store, MemoryFleet([fleet_node(i) for i in range(8)]))
    [halted] = [e for e in store.events.events if isinstance(e, RolloutHalted)]
    assert "stratum gb200/acme/" in halted.reason and "has 8 node(s) in scope" in halted.reason
    assert not [e for e in store.events.events if isinstance(e, RolloutPlanned)]
    assert store.audit_of(rollout_id_of(data.intent_id))[-1].action == "refused"


def test_an_unreadable_gate_policy_stops_the_planner_with_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "gate.toml"
    bad.write_text("[minimum]\ncanary_nodes = 1\n")
    with pytest.raises(ConfigurationError, match="gate_policy_file: ") as stopped:
        load_gate_minimum(Settings(gate_policy_file=bad))
    assert "\n" not in str(stopped.value)
    with pytest.raises(ConfigurationError, match="cannot be read"):
        load_gate_minimum(Settings(gate_policy_file=tmp_path / "missing.toml"))


def test_the_healthgate_policy_file_sets_the_minimum(tmp_path: Path) -> None:
    raised = tmp_path / "gate.toml"
    packaged = resources.files("lockstep_gate").joinpath("data", "default_policy.toml").read_text()
    raised.write_text(
        packaged.replace(
            "canary_nodes = 5\ncontrol_nodes = 5", "canary_nodes = 6\ncontrol_nodes = 7"
        )
    )
    assert load_gate_minimum(Settings(gate_policy_file=raised)) == GateMinimum(6, 7)


def test_the_refusal_is_on_unless_a_deployment_turns_it_off() -> None:
    """On by default (the check is the point); off only by saying so, for a benchmark's
    generated fleet or a lab that accepts inconclusive gates."""
    assert Settings().refuse_unjudgeable is True
    assert load_gate_minimum(Settings()) == PACKAGED
    assert load_gate_minimum(Settings(refuse_unjudgeable=False)) is None
