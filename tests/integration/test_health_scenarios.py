"""Every healthgate verdict end to end over the simulator's realistic health series (issue 11
item 7): the five services on real NATS + PostgreSQL (``rollout_stack``), the node agents
publishing per-profile baselines with per-node offsets, noise, diurnal drift and benign XIDs,
and the health scenarios injected through the simulator's fault plan (``PUT /faults``).

- a good image with benign XIDs in the series passes (no false trip);
- a bad image (``degrade_health`` naming the image's version) trips on the canary alone (the
  blast-radius F1 and ``test_rollout_e2e`` check what follows: the halt, the flip-backs);
- a fleet-wide network problem (``network_degraded`` on every node) is inconclusive,
  environmental;
- a thermal event on a control rack (``thermal_event``) does not blame the rollout, nor does
  one on the whole control (which holds the rollout for a human);
- the straggler watch flags a throttled node outside rollouts.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest

from lockstep_cli.polling import until
from lockstep_sim.agents.health_model import BENIGN_XIDS
from lockstep_sim.faults import Fault, FaultPlan
from tests.integration.rollout_stack import NODES, Stack, running_stack
from tests.integration.sim.pldm_fixtures import NEW_GPU_VERSION

pytestmark = pytest.mark.integration
Launch = Callable[..., AbstractAsyncContextManager[Stack]]


@pytest.fixture
def launch(servers: Any, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Launch:
    return functools.partial(running_stack, servers, namespace, tmp_path, monkeypatch)


def scenario(stack: Stack, *faults: Fault) -> None:
    """Replace the simulator's fault plan, as ``PUT /faults`` does."""
    stack.rt.simulator.set_faults(FaultPlan(faults=faults))


async def benign_xids_stored(stack: Stack) -> int:
    """Stored health reports that carry a benign XID and count it as non-fatal."""
    pool = stack.apps["healthgate"].require().pool
    codes = [int(code) for code in BENIGN_XIDS]
    return int(
        await pool.fetchval(
            "SELECT count(*) FROM health_samples WHERE xid_codes && $1::integer[]"
            " AND xid_nonfatal_count > 0",
            codes,
        )
    )


async def test_a_good_image_over_realistic_series_with_benign_xids_passes(launch: Launch) -> None:
    """No false trip: every node throws benign (application-level) XIDs at 3% of its reports,
    100 times the default rate, on top of noise, offsets and drift; both waves pass and the
    rollout completes."""
    async with launch() as stack:
        for software in stack.rt.software.values():
            software.benign_xid_rate = 0.03
        await stack.start_rollout()
        (done,) = await stack.wait("planner", "rollout.completed.")
        assert done["nodes_updated"] == NODES, done
        assert [p["wave"] for p in await stack.emitted("healthgate", "gate.passed.")] == [0, 1]
        assert await stack.emitted("healthgate", "gate.tripped.") == []
        assert await benign_xids_stored(stack) > 0  # the XIDs did reach the gate


async def test_a_bad_image_trips_the_gate_on_the_canary(launch: Launch) -> None:
    """The image's version degrades every GPU that activates it (XID 48/79, DCGM failing,
    busbw under 92%): the gate trips on the canary's nodes, and the rollout halts."""
    async with launch() as stack:
        bad = Fault("degrade_health", components=("gpu",), image=NEW_GPU_VERSION)
        scenario(stack, bad)
        await stack.start_rollout()
        (canary,) = await stack.wait("planner", "wave.planned.")
        (tripped,) = await stack.wait("healthgate", "gate.tripped.")
        assert tripped["wave"] == 0, tripped
        assert tripped["offending_nodes"], tripped
        assert set(tripped["offending_nodes"]) <= set(canary["node_ids"]), tripped
        await stack.wait("planner", "rollout.halted.")
        assert await stack.emitted("healthgate", "gate.passed.") == []


async def test_a_fleet_wide_network_problem_is_inconclusive_environmental(
    launch: Launch,
) -> None:
    """Once the canary is released the fabric degrades for every node, canary and control
    alike (``network_degraded``, busbw at 60%): the gate does not trip, its verdict is
    inconclusive and names the finding environmental."""
    async with launch() as stack:
        await stack.start_rollout()
        await stack.wait("planner", "wave.planned.")
        scenario(stack, Fault("network_degraded", busbw_factor=0.6))
        (judged,) = await stack.wait("healthgate", "gate.inconclusive.")
        assert judged["wave"] == 0 and judged["verdict"] == "inconclusive", judged
        assert "environmental" in json.dumps(judged["evidence"]), judged
        assert judged["offending_nodes"] == [], judged
        assert await stack.emitted("healthgate", "gate.tripped.") == []
        assert await stack.emitted("planner", "rollout.halted.") == []


async def canary_verdict(stack: Stack) -> dict[str, Any]:
    """The healthgate's verdict on wave 0, whichever it is."""

    async def judged() -> list[dict[str, Any]] | None:
        found = [
            v
            for kind in ("passed", "inconclusive", "tripped")
            for v in await stack.emitted("healthgate", f"gate.{kind}.")
            if v["wave"] == 0
        ]
        return found or None

    (verdict,) = await until(judged, what="the canary's verdict", timeout_s=40)
    return verdict


async def throttle_during_the_canary(stack: Stack, how_many: int) -> tuple[list[str], str]:
    """Start the rollout; once the canary is planned, a thermal event on ``how_many`` of the
    control's nodes; the canary's rollout id and the throttled nodes."""
    await stack.start_rollout()
    (canary,) = await stack.wait("planner", "wave.planned.")
    control = [n.id for n in stack.rt.fleet if n.id not in canary["node_ids"]]
    assert len(control) == NODES - len(canary["node_ids"]) >= how_many
    hot = control[:how_many]
    scenario(stack, Fault("thermal_event", nodes=tuple(hot)))
    sample = stack.rt.software[hot[0]].sample_health()
    assert sample.sm_clock_mhz is not None and sample.sm_clock_mhz < 1700, sample
    assert "hw_thermal_slowdown" in sample.throttle_reasons, sample
    return hot, str(canary["rollout_id"])


async def test_a_thermal_event_on_a_control_rack_does_not_blame_the_rollout(
    launch: Launch,
) -> None:
    """Two of the control's five nodes (their rack) throttle (``thermal_event``: clocks at 80%,
    temperatures up, thermal throttle reasons, busbw under the 92% rule) while the canary
    soaks: the canary is not worse than its control, so it passes; once the event ends the
    rollout completes."""
    async with launch() as stack:
        await throttle_during_the_canary(stack, 2)
        verdict = await canary_verdict(stack)
        assert verdict["verdict"] == "passed", json.dumps(verdict, indent=1)
        scenario(stack)  # the event ends (the control nodes are the next wave)
        (done,) = await stack.wait("planner", "rollout.completed.")
        assert done["nodes_updated"] == NODES, done
        assert await stack.emitted("healthgate", "gate.tripped.") == []


async def test_a_thermal_event_on_the_whole_control_holds_without_blaming_the_rollout(
    launch: Launch,
) -> None:
    """Every control node throttles while the canary soaks. The gate does not trip and names
    no offending node; it holds the rollout for a human (inconclusive), the planner pauses,
    nothing is halted. (The hold is on board power: a throttled control draws less, so the
    healthy canary's power reads as worse than its control's; see the branch's report.)"""
    async with launch() as stack:
        _, rollout = await throttle_during_the_canary(stack, NODES // 2)
        verdict = await canary_verdict(stack)
        assert verdict["verdict"] in {"passed", "inconclusive"}, json.dumps(verdict, indent=1)
        assert verdict["offending_nodes"] == [], verdict
        assert await stack.emitted("healthgate", "gate.tripped.") == []
        assert await stack.emitted("planner", "rollout.halted.") == []
        assert await stack.emitted("updater", "rollout.halted.") == []
        if verdict["verdict"] == "inconclusive":
            pool = stack.apps["planner"].require().pool

            async def paused() -> bool:
                sql = "SELECT state FROM rollouts WHERE rollout_id = $1"
                return bool(await pool.fetchval(sql, rollout) == "paused")

            await until(paused, what="the planner pausing for a human", timeout_s=20)


async def test_the_straggler_watch_flags_a_throttled_node_outside_rollouts(
    launch: Launch, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No rollout: one node's GPUs throttle (``thermal_event`` on that node alone). The
    healthgate's straggler watch, comparing every node with its profile's peers, announces it
    (``drift.stragglers.gb200``) on its SM clock or busbw, and no other node."""
    monkeypatch.setenv("LOCKSTEP_HEALTHGATE_STRAGGLER_INTERVAL_S", "1")
    monkeypatch.setenv("LOCKSTEP_HEALTHGATE_STRAGGLER_WINDOW_S", "15")
    async with launch() as stack:
        hot = stack.rt.fleet[3].id
        scenario(stack, Fault("thermal_event", nodes=(hot,)))

        async def flagged() -> dict[str, Any] | None:
            found = [
                e for e in await stack.emitted("healthgate", "drift.stragglers.") if e["stragglers"]
            ]
            return found[0] if found else None

        try:
            event = await until(flagged, what="a straggler announced", timeout_s=40)
        except TimeoutError as exc:
            raise AssertionError(await stack.story()) from exc
        assert event["profile"] == "gb200" and event["nodes"] == NODES, event
        assert {s["node_id"] for s in event["stragglers"]} == {hot}, event
        # Clocks 20% down, busbw 10% down: either is far outside the peers' spread.
        metrics = {s["metric"] for s in event["stragglers"]}
        assert metrics and metrics <= {"sm_clock_mhz", "nccl_busbw_gbps"}, event
